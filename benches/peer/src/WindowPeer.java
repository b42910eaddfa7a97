// The Kafka Streams peer of eosflow's windowed benchmark shape: per key, the count and the sum of
// the amounts in tumbling event-time windows with a grace period, one result per window when it
// closes — the DSL's
//   groupByKey().windowedBy(TimeWindows.ofSizeAndGrace(size, grace)).aggregate(…)
//     .suppress(Suppressed.untilWindowCloses(BufferConfig.unbounded()))
// — the same work `eosflow run --topology windowed-sum` does (benches/src/windowed.rs).
//
// Values are decoded as CountPeer decodes them (Avro order events in the registry's wire format
// with a reused record and decoder, or decimal text). The aggregate is stored and emitted as 16
// bytes (count, sum; big-endian) and the result's key as the key's UTF-8 bytes, the window's start
// and its end (8 big-endian bytes each): byte for byte eosflow's `WindowedSerde<String>` and
// count-sum serde, so both outputs can be read and checked the same way. The window store is
// Kafka Streams' default for `aggregate` (RocksDB, record cache on), the suppression buffer its
// default in-memory buffer with a changelog.
//
// Usage: WindowPeer <bootstrap> <input> <output> <application.id> <state.dir>
//                   <exactly_once_v2|at_least_once> <commit.interval.ms> <order-placed.v1.avsc>
//                   <window.size.ms> <grace.ms>
// Prints "RUNNING" on a line when the instance reaches RUNNING (restores done).

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Properties;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.state.WindowStore;

public final class WindowPeer {
  static final String STORE = "windows";

  /** The amount of a value, decoded as CountPeer decodes it (reused record and decoder). */
  static final class Amount {
    private final GenericDatumReader<GenericRecord> reader;
    private BinaryDecoder decoder;
    private GenericRecord order;

    Amount(Schema schema) {
      reader = new GenericDatumReader<>(schema);
    }

    long of(byte[] v) {
      if (v.length > 5 && v[0] == 0) {
        decoder = DecoderFactory.get().binaryDecoder(v, 5, v.length - 5, decoder);
        try {
          order = reader.read(order, decoder);
        } catch (IOException e) {
          throw new UncheckedIOException(e);
        }
        return (Long) order.get("total_minor");
      }
      return Long.parseLong(new String(v, StandardCharsets.UTF_8).trim());
    }
  }

  /** A window's count and sum. */
  static final class CountSum {
    final long count;
    final long sum;

    CountSum(long count, long sum) {
      this.count = count;
      this.sum = sum;
    }
  }

  /** {@link CountSum} as 16 big-endian bytes, as eosflow writes it. */
  static final Serde<CountSum> COUNT_SUM =
      Serdes.serdeFrom(
          (Serializer<CountSum>)
              (topic, v) -> ByteBuffer.allocate(16).putLong(v.count).putLong(v.sum).array(),
          (Deserializer<CountSum>)
              (topic, b) -> {
                ByteBuffer buf = ByteBuffer.wrap(b);
                return new CountSum(buf.getLong(), buf.getLong());
              });

  /** A result's key: key bytes, window start, window end (eosflow's `WindowedSerde`). */
  static final Serializer<Windowed<String>> WINDOWED_KEY =
      (topic, w) -> {
        byte[] k = w.key().getBytes(StandardCharsets.UTF_8);
        return ByteBuffer.allocate(k.length + 16)
            .put(k)
            .putLong(w.window().start())
            .putLong(w.window().end())
            .array();
      };

  /** The results' keys are only written here. */
  static final Deserializer<Windowed<String>> NOT_READ =
      (topic, b) -> {
        throw new UnsupportedOperationException("the peer never reads its results");
      };

  public static void main(String[] args) throws Exception {
    if (args.length != 10) {
      System.err.println(
          "usage: WindowPeer <bootstrap> <input> <output> <application.id> <state.dir> <guarantee> <commit.interval.ms> <schema.avsc> <window.size.ms> <grace.ms>");
      System.exit(2);
    }
    Schema schema = new Schema.Parser().parse(new File(args[7]));
    Duration size = Duration.ofMillis(Long.parseLong(args[8]));
    Duration grace = Duration.ofMillis(Long.parseLong(args[9]));
    Properties p = Peer.config(args);

    // One amount decoder per stream thread (there is one), as CountPeer has one per task.
    ThreadLocal<Amount> amounts = ThreadLocal.withInitial(() -> new Amount(schema));
    StreamsBuilder b = new StreamsBuilder();
    b.stream(args[1], Consumed.with(Serdes.String(), Serdes.ByteArray()))
        .mapValues(v -> amounts.get().of(v))
        .groupByKey(Grouped.with(Serdes.String(), Serdes.Long()))
        .windowedBy(TimeWindows.ofSizeAndGrace(size, grace))
        .aggregate(
            () -> new CountSum(0, 0),
            (key, amount, agg) -> new CountSum(agg.count + 1, agg.sum + amount),
            Materialized.<String, CountSum, WindowStore<Bytes, byte[]>>as(STORE)
                .withKeySerde(Serdes.String())
                .withValueSerde(COUNT_SUM))
        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
        .toStream()
        .to(args[2], Produced.with(Serdes.serdeFrom(WINDOWED_KEY, NOT_READ), COUNT_SUM));

    Peer.run(b.build(), p);
  }
}
