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

import org.apache.avro.Schema;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
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
    Properties p = Peer.config(args);
    p.put(StreamsConfig.TOPOLOGY_OPTIMIZATION_CONFIG, StreamsConfig.OPTIMIZE);

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

    Peer.run(b.build(p), p);
  }
}
