// What every Kafka Streams peer of the benchmarks shares: the streams configuration the
// contenders are compared under (one stream thread, the guarantee and commit interval given,
// earliest offsets, the 6 s session timeout eosflow's instances use too) and the run until
// SIGTERM/SIGKILL, printing each state change (the driver waits for RUNNING in the log).
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;

final class Peer {
  private Peer() {}

  /**
   * The configuration from the peers' common arguments: bootstrap, application id, state dir,
   * guarantee, commit interval (args 0 and 3–6).
   */
  static Properties config(String[] args) {
    Properties p = new Properties();
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[3]);
    p.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, args[5]);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, args[6]);
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);
    return p;
  }

  /** Runs `topology` until the process is stopped; exits 1 if Kafka Streams fails. */
  static void run(Topology topology, Properties p) throws InterruptedException {
    KafkaStreams streams = new KafkaStreams(topology, p);
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
