// What every Kafka Streams peer of the benchmarks shares: the streams configuration the
// contenders are compared under (one stream thread, the guarantee and commit interval given,
// earliest offsets, the 6 s session timeout eosflow's instances use too) and the run until
// SIGTERM/SIGKILL, printing each state change (the driver waits for RUNNING in the log).
// For the restore and failover benchmarks it also prints, with the wall clock in µs, when the
// main consumer is assigned partitions (`ASSIGNED`) and when each changelog partition's restore
// starts and ends (`RESTORE_START` / `RESTORE_END`, from a StateRestoreListener); system
// properties `bench.standby.replicas` and `bench.threads` set `num.standby.replicas` and
// `num.stream.threads`.
// System property `bench.rocksdb.memory.bytes` (> 0) bounds the RocksDB memory of all the
// instance's stores together with Kafka Streams' documented bounded-memory configuration
// (BoundedMemory below); absent or 0, every store keeps Kafka Streams' defaults (its own 50 MiB
// block cache and up to 3 × 16 MiB memtables, so memory grows with the partitions owned).
// System property `bench.transactional.statestores=true` turns on KIP-892's transactional state
// stores (`enable.transactional.statestores`; `statestore.uncommitted.max.bytes` stays at its
// 64 MiB default): contender kstreams-eos-txn. System property `bench.group.protocol=streams`
// runs the streams rebalance protocol (KIP-1071, `group.protocol=streams`): contender
// kstreams-eos-streams; its session timeout, heartbeat and standby replicas are the broker's
// group settings, so the consumer's and the standby count set here are left out.
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.Collection;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.regex.Pattern;

import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.processor.internals.DefaultKafkaClientSupplier;
import org.apache.kafka.streams.state.RocksDBConfigSetter;
import org.rocksdb.BlockBasedTableConfig;
import org.rocksdb.Cache;
import org.rocksdb.LRUCache;
import org.rocksdb.Options;
import org.rocksdb.RocksDB;
import org.rocksdb.WriteBufferManager;

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
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.getInteger("bench.threads", 1));
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
    String protocol = System.getProperty("bench.group.protocol", "classic").trim();
    if (protocol.equals("streams")) {
      p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "streams");
      event("GROUP_PROTOCOL streams");
    } else if (protocol.equals("classic")) {
      p.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, Integer.getInteger("bench.standby.replicas", 0));
      p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
      p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);
    } else {
      throw new IllegalArgumentException("bench.group.protocol must be classic or streams, got " + protocol);
    }
    if (Boolean.getBoolean("bench.transactional.statestores")) {
      p.put(StreamsConfig.TRANSACTIONAL_STATE_STORES_CONFIG, true);
      event("TRANSACTIONAL_STATE_STORES on, " + StreamsConfig.STATESTORE_UNCOMMITTED_MAX_BYTES_CONFIG + " at its default");
    }
    long memory = rocksdbMemoryBytes();
    if (memory > 0) {
      p.put(StreamsConfig.ROCKSDB_CONFIG_SETTER_CLASS_CONFIG, BoundedMemory.class);
      event("ROCKSDB bounded " + memory + " bytes, memtables " + memory / 2 + " bytes");
    } else {
      event("ROCKSDB defaults");
    }
    return p;
  }

  /**
   * System property `bench.rocksdb.memory.bytes`: 0 when absent or empty; anything but a count
   * fails the peer. Read here rather than in BoundedMemory, whose loading makes the cache.
   */
  static long rocksdbMemoryBytes() {
    String v = System.getProperty("bench.rocksdb.memory.bytes", "").trim();
    long bytes = v.isEmpty() ? 0 : Long.parseLong(v);
    if (bytes < 0) {
      throw new IllegalArgumentException("bench.rocksdb.memory.bytes must be >= 0, got " + v);
    }
    return bytes;
  }

  /**
   * Kafka Streams' bounded-memory RocksDB configuration, as its developer guide gives it
   * ("Memory Management", BoundedMemoryRocksDBConfig): one LRU block cache shared by every store
   * of the instance, a WriteBufferManager charging all memtables to that cache, index and filter
   * blocks in the cache at high priority, the top-level index and filter pinned. So the
   * instance's RocksDB memory stays near `bench.rocksdb.memory.bytes` however many partitions it
   * owns — what eosflow's `state.memory_bytes` does (one cache, a write-buffer manager of half the
   * budget charged to it; src/state/store.rs StoreCache), hence the same split: memtables get
   * half. The high-priority share is RocksDB's own default for a new LRU cache (0.5), which is the
   * cache eosflow builds. Block size and the memtables' size and number stay Kafka Streams'
   * defaults (4 KiB; 3 × 16 MiB per store, flushed earlier by the manager): the guide leaves them
   * to tuning, and only the memory bound is under test.
   *
   * <p>Kafka Streams makes one instance per store, so the cache and the manager are static; they
   * are never closed (every store shares them until the process exits).
   */
  public static final class BoundedMemory implements RocksDBConfigSetter {
    /** Fraction of the cache kept for index and filter blocks (RocksDB's LRU default). */
    static final double INDEX_FILTER_BLOCK_RATIO = 0.5;

    static {
      // The native library, before the cache below is made: only some rocksdbjni classes
      // (Options, RocksDB) load it themselves, LRUCache does not.
      RocksDB.loadLibrary();
    }

    private static final long TOTAL = rocksdbMemoryBytes();
    private static final Cache CACHE = new LRUCache(TOTAL, -1, false, INDEX_FILTER_BLOCK_RATIO);
    private static final WriteBufferManager WRITE_BUFFERS = new WriteBufferManager(TOTAL / 2, CACHE);

    public BoundedMemory() {}

    @Override
    public void setConfig(String storeName, Options options, Map<String, Object> configs) {
      BlockBasedTableConfig table = (BlockBasedTableConfig) options.tableFormatConfig();
      // These three together bound the store's memory by the shared cache.
      table.setBlockCache(CACHE);
      table.setCacheIndexAndFilterBlocks(true);
      options.setWriteBufferManager(WRITE_BUFFERS);
      // Recommended with a bound: index and filter blocks are not evicted by data blocks.
      table.setCacheIndexAndFilterBlocksWithHighPriority(true);
      table.setPinTopLevelIndexAndFilter(true);
      options.setTableFormatConfig(table);
    }

    @Override
    public void close(String storeName, Options options) {
      // The cache and the manager are shared by every store: not closed here.
    }
  }

  /** Wall clock, µs since the epoch (the driver's clock: same machine). */
  static long nowUs() {
    return ChronoUnit.MICROS.between(Instant.EPOCH, Instant.now());
  }

  static synchronized void event(String line) {
    System.out.println(line);
    System.out.flush();
  }

  /**
   * The default clients, whose main consumer prints `ASSIGNED <µs> <partitions>` when the group
   * hands it partitions: the start of "assignment received → processing".
   */
  static final class Clients extends DefaultKafkaClientSupplier {
    @Override
    public Consumer<byte[], byte[]> getConsumer(Map<String, Object> config) {
      return new KafkaConsumer<>(config, new ByteArrayDeserializer(), new ByteArrayDeserializer()) {
        @Override
        public void subscribe(Collection<String> topics, ConsumerRebalanceListener l) {
          super.subscribe(topics, logged(l));
        }

        @Override
        public void subscribe(Pattern pattern, ConsumerRebalanceListener l) {
          super.subscribe(pattern, logged(l));
        }
      };
    }

    static ConsumerRebalanceListener logged(ConsumerRebalanceListener l) {
      return new ConsumerRebalanceListener() {
        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> parts) {
          l.onPartitionsRevoked(parts);
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> parts) {
          event("ASSIGNED " + nowUs() + " " + parts.size() + " " + parts);
          l.onPartitionsAssigned(parts);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> parts) {
          l.onPartitionsLost(parts);
        }
      };
    }
  }

  /** Prints each active restore's start and end (µs) and what it replayed. */
  static final class Restores implements StateRestoreListener {
    @Override
    public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
      event("RESTORE_START " + nowUs() + " " + tp.topic() + " " + tp.partition() + " " + start + " " + end);
    }

    @Override
    public void onBatchRestored(TopicPartition tp, String store, long end, long n) {}

    @Override
    public void onRestoreEnd(TopicPartition tp, String store, long total) {
      event("RESTORE_END " + nowUs() + " " + tp.topic() + " " + tp.partition() + " " + total);
    }
  }

  /** Runs `topology` until the process is stopped; exits 1 if Kafka Streams fails. */
  static void run(Topology topology, Properties p) throws InterruptedException {
    KafkaStreams streams = new KafkaStreams(topology, p, new Clients());
    streams.setGlobalStateRestoreListener(new Restores());
    CountDownLatch done = new CountDownLatch(1);
    streams.setStateListener(
        (now, before) -> {
          event(now.toString());
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
