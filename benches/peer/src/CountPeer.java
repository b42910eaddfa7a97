// The Kafka Streams peer of eosflow's benchmarks: the counting topology (per-key count and sum in
// a RocksDB store with a changelog, one JSON output per input naming the input's id), the same
// one `eosflow run --topology count` runs, so the two are measured on identical work.
//
// Values are Avro order events in the registry's wire format (magic byte 0, 4-byte schema id,
// Avro body; decoded with the contract's schema, reused record and decoder: the equivalent of
// eosflow's cached writer schema) or decimal text; `total_minor` / the number is the amount.
//
// Usage: CountPeer <bootstrap> <input> <output> <application.id> <state.dir>
//                  <exactly_once_v2|at_least_once> <commit.interval.ms> <order-placed.v1.avsc>
// Prints "RUNNING" on a line when the instance reaches RUNNING (restores done).

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Properties;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

public final class CountPeer {
  static final String STORE = "count";

  /** Per key: count and sum (16 bytes, as eosflow stores them); one output per input. */
  static final class Count implements Processor<String, byte[], String, String> {
    private final GenericDatumReader<GenericRecord> reader;
    private BinaryDecoder decoder;
    private GenericRecord order;
    private ProcessorContext<String, String> ctx;
    private KeyValueStore<String, byte[]> store;

    Count(Schema schema) {
      reader = new GenericDatumReader<>(schema);
    }

    private long amount(byte[] v) {
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

    @Override
    public void init(ProcessorContext<String, String> context) {
      ctx = context;
      store = context.getStateStore(STORE);
    }

    @Override
    public void process(Record<String, byte[]> r) {
      long amount = amount(r.value());
      byte[] old = store.get(r.key());
      long count = 0;
      long sum = 0;
      if (old != null) {
        ByteBuffer b = ByteBuffer.wrap(old);
        count = b.getLong();
        sum = b.getLong();
      }
      count += 1;
      sum += amount;
      store.put(r.key(), ByteBuffer.allocate(16).putLong(count).putLong(sum).array());
      Header idh = r.headers().lastHeader("id");
      String id = idh == null ? "" : new String(idh.value(), StandardCharsets.UTF_8);
      String out = "{\"id\":\"" + id + "\",\"count\":" + count + ",\"sum\":" + sum + "}";
      Record<String, String> o = new Record<>(r.key(), out, r.timestamp());
      o.headers().add("causation_id", id.getBytes(StandardCharsets.UTF_8));
      ctx.forward(o);
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 8) {
      System.err.println(
          "usage: CountPeer <bootstrap> <input> <output> <application.id> <state.dir> <guarantee> <commit.interval.ms> <schema.avsc>");
      System.exit(2);
    }
    Schema schema = new Schema.Parser().parse(new File(args[7]));
    Properties p = Peer.config(args);

    StreamsBuilder b = new StreamsBuilder();
    b.addStateStore(
        Stores.keyValueStoreBuilder(
                Stores.persistentKeyValueStore(STORE), Serdes.String(), Serdes.ByteArray())
            .withCachingEnabled());
    b.stream(args[1], Consumed.with(Serdes.String(), Serdes.ByteArray()))
        .process(() -> new Count(schema), STORE)
        .to(args[2], Produced.with(Serdes.String(), Serdes.String()));

    Peer.run(b.build(), p);
  }
}
