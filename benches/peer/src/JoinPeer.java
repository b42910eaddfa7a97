// The Kafka Streams peer of the benchmarks' stream-table join shape: every order of the input
// joined with its customer's row from a table (`builder.table`) co-partitioned with it, exactly
// as eosflow's `--topology stream-table-join` does (`benches/src/join.rs`):
// `stream.mapValues(amount).join(table, (amount, row) -> amount · row)`, result value = the
// amount as 8 big-endian bytes followed by the row's bytes.
//
// The topology is built with `topology.optimization=all`, so the table's source topic is its
// changelog (`reuse.ktable.source.topics`): no second copy, as in eosflow.
import java.io.File;
import java.nio.ByteBuffer;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.avro.Schema;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

public final class JoinPeer {
  static final String TABLE_STORE = "customers";

  public static void main(String[] args) throws Exception {
    if (args.length != 9) {
      System.err.println(
          "usage: JoinPeer <bootstrap> <input> <output> <application.id> <state.dir> <guarantee> <commit.interval.ms> <schema.avsc> <table topic>");
      System.exit(2);
    }
    Schema schema = new Schema.Parser().parse(new File(args[7]));
    Properties p = new Properties();
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[3]);
    p.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, args[5]);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, args[6]);
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    p.put(StreamsConfig.TOPOLOGY_OPTIMIZATION_CONFIG, StreamsConfig.OPTIMIZE);
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);

    // One amount decoder per stream thread (there is one), as WindowPeer.
    ThreadLocal<WindowPeer.Amount> amounts =
        ThreadLocal.withInitial(() -> new WindowPeer.Amount(schema));
    StreamsBuilder b = new StreamsBuilder();
    KTable<String, byte[]> customers =
        b.table(
            args[8],
            Consumed.with(Serdes.String(), Serdes.ByteArray()),
            Materialized.<String, byte[], KeyValueStore<Bytes, byte[]>>as(TABLE_STORE)
                .withKeySerde(Serdes.String())
                .withValueSerde(Serdes.ByteArray()));
    b.stream(args[1], Consumed.with(Serdes.String(), Serdes.ByteArray()))
        .mapValues(v -> amounts.get().of(v))
        .join(
            customers,
            (amount, row) ->
                ByteBuffer.allocate(8 + row.length).putLong(amount).put(row).array(),
            org.apache.kafka.streams.kstream.Joined.with(
                Serdes.String(), Serdes.Long(), Serdes.ByteArray()))
        .to(args[2], Produced.with(Serdes.String(), Serdes.ByteArray()));

    KafkaStreams streams = new KafkaStreams(b.build(p), p);
    CountDownLatch done = new CountDownLatch(1);
    streams.setStateListener(
        (now, before) -> {
          System.out.println(now);
          System.out.flush();
          if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
            done.countDown();
          }
        });
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      streams.close();
      done.countDown();
    }));
    streams.start();
    done.await();
    System.exit(streams.state() == KafkaStreams.State.ERROR ? 1 : 0);
  }
}
