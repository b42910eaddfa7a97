// The Debezium side of the outbox benchmark (tests/outbox/debezium.rs drives it).
//
// Debezium's embedded engine (Postgres connector, pgoutput, the Outbox Event Router SMT)
// publishes each outbox row to Kafka with an idempotent producer, as Debezium Server's Kafka
// sink does: a batch's records are sent, the producer is flushed, then the batch is marked
// processed, and the engine stores its offsets (the LSN) in a file every
// `offset.flush.interval.ms`. That is at-least-once: after a kill -9, the rows since the last
// stored offset are published again. The benchmark counts those duplicates.
//
// Usage: DebeziumPeer <bootstrap> <postgres-url> <schema.table> <slot> <publication>
//                     <topic-replacement> <offsets-file> <offset-flush-interval-ms>
// The table has eosflow's outbox shape (migrations/0001_outbox.sql): the router reads id,
// aggregate_id (key), payload (value), aggregate_type (routing) and type (a header).
import io.debezium.embedded.Connect;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.ChangeEvent;
import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.source.SourceRecord;

public final class DebeziumPeer {
  public static void main(String[] args) throws Exception {
    if (args.length != 8) {
      System.err.println(
          "usage: DebeziumPeer <bootstrap> <postgres-url> <schema.table> <slot> <publication>"
              + " <topic-replacement> <offsets-file> <offset-flush-interval-ms>");
      System.exit(2);
    }
    String bootstrap = args[0];
    URI pg = URI.create(args[1].replaceFirst("^postgres(ql)?://", "http://"));
    String[] user = pg.getRawUserInfo() == null ? new String[] {"postgres", ""} : pg.getRawUserInfo().split(":", 2);
    Properties p = new Properties();
    p.setProperty("name", "eosflow-bench-debezium");
    p.setProperty("connector.class", "io.debezium.connector.postgresql.PostgresConnector");
    p.setProperty("offset.storage", "org.apache.kafka.connect.storage.FileOffsetBackingStore");
    p.setProperty("offset.storage.file.filename", args[6]);
    p.setProperty("offset.flush.interval.ms", args[7]);
    p.setProperty("database.hostname", pg.getHost());
    p.setProperty("database.port", String.valueOf(pg.getPort() > 0 ? pg.getPort() : 5432));
    p.setProperty("database.user", URLDecoder.decode(user[0], StandardCharsets.UTF_8));
    p.setProperty(
        "database.password", user.length > 1 ? URLDecoder.decode(user[1], StandardCharsets.UTF_8) : "");
    p.setProperty("database.dbname", pg.getPath().replaceFirst("^/", ""));
    p.setProperty("topic.prefix", "eosflow-bench-dbz");
    p.setProperty("plugin.name", "pgoutput");
    p.setProperty("slot.name", args[3]);
    p.setProperty("publication.name", args[4]);
    p.setProperty("publication.autocreate.mode", "filtered");
    // After a kill -9 the slot stays active until Postgres notices the old walsender is gone:
    // retry every half second (the default waits 10 s between its 6 tries).
    p.setProperty("slot.max.retries", "120");
    p.setProperty("slot.retry.delay.ms", "500");
    p.setProperty("table.include.list", args[2]);
    // Tuned like the eosflow router it is measured against (50 ms commit interval, batches of
    // 5000): Debezium's defaults (500 ms poll interval, batches of 2048) would add latency.
    p.setProperty("poll.interval.ms", "50");
    p.setProperty("max.batch.size", "5000");
    p.setProperty("max.queue.size", "20000");
    // The slot already exists when the backlog is written: stream from it, no snapshot.
    p.setProperty("snapshot.mode", "no_data");
    p.setProperty("transforms", "outbox");
    p.setProperty("transforms.outbox.type", "io.debezium.transforms.outbox.EventRouter");
    p.setProperty("transforms.outbox.table.field.event.id", "id");
    p.setProperty("transforms.outbox.table.field.event.key", "aggregate_id");
    p.setProperty("transforms.outbox.table.field.event.payload", "payload");
    p.setProperty("transforms.outbox.route.by.field", "aggregate_type");
    p.setProperty("transforms.outbox.route.topic.replacement", args[5]);
    p.setProperty("transforms.outbox.table.fields.additional.placement", "type:header:type");

    Properties kp = new Properties();
    kp.setProperty("bootstrap.servers", bootstrap);
    kp.setProperty("enable.idempotence", "true");
    kp.setProperty("acks", "all");
    KafkaProducer<byte[], byte[]> producer =
        new KafkaProducer<>(kp, new ByteArraySerializer(), new ByteArraySerializer());

    DebeziumEngine.ChangeConsumer<ChangeEvent<SourceRecord, SourceRecord>> sink =
        (List<ChangeEvent<SourceRecord, SourceRecord>> batch,
            DebeziumEngine.RecordCommitter<ChangeEvent<SourceRecord, SourceRecord>> committer) -> {
          for (ChangeEvent<SourceRecord, SourceRecord> event : batch) {
            // With the Connect format the event carries the transformed SourceRecord.
            SourceRecord r = event.value() != null ? event.value() : event.key();
            if (r.topic() != null && r.topic().startsWith("eosflow-bench-dbz")) {
              // Not an outbox row (e.g. a heartbeat): nothing to publish.
              committer.markProcessed(event);
              continue;
            }
            RecordHeaders headers = new RecordHeaders();
            for (Header h : r.headers()) {
              if (h.value() != null) {
                headers.add(h.key(), String.valueOf(h.value()).getBytes(StandardCharsets.UTF_8));
              }
            }
            producer.send(
                new ProducerRecord<>(r.topic(), null, bytes(r.key()), bytes(r.value()), headers));
            committer.markProcessed(event);
          }
          // Everything sent is acknowledged before the engine may store the batch's offset.
          producer.flush();
          committer.markBatchFinished();
        };
    DebeziumEngine<ChangeEvent<SourceRecord, SourceRecord>> engine =
        DebeziumEngine.create(Connect.class)
            .using(p)
            .notifying(sink)
            .using(
                (success, message, error) -> {
                  System.err.println("debezium engine stopped: " + message);
                  if (error != null) {
                    error.printStackTrace();
                  }
                  System.exit(success ? 0 : 1);
                })
            .build();
    System.out.println("debezium peer starting");
    ExecutorService executor = Executors.newSingleThreadExecutor();
    executor.execute(engine);
  }

  private static byte[] bytes(Object o) {
    if (o == null) {
      return null;
    }
    if (o instanceof byte[] b) {
      return b;
    }
    return String.valueOf(o).getBytes(StandardCharsets.UTF_8);
  }
}
