package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/capture"
)

// kafkaClient opens a franz-go client and checks that a broker answers, so
// a wrong address fails at start with a clear message instead of retrying
// silently.
func kafkaClient(ctx context.Context, kc kafkaConfig, opts ...kgo.Opt) (*kgo.Client, error) {
	brokers := kc.brokers
	if len(brokers) == 0 {
		return nil, fmt.Errorf("no Kafka brokers given: set --kafka or WALHOUSE_KAFKA_BROKERS")
	}
	all := append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, kc.security...)
	cl, err := kgo.NewClient(append(all, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		cl.Close()
		if errors.Is(err, kerr.SaslAuthenticationFailed) {
			return nil, fmt.Errorf("log in to Kafka at %v: %w; check --kafka-sasl-user and the password", brokers, err)
		}
		// An unknown CA (a private one, as self-managed clusters use) or a
		// name the certificate does not cover: retrying never fixes either.
		if certificateError(err) {
			return nil, fmt.Errorf("connect to Kafka at %v over TLS: %w; the broker's certificate did not verify: give the CA that signed it with --kafka-tls-ca (env WALHOUSE_KAFKA_TLS_CA), and name the brokers in --kafka as their certificate does", brokers, err)
		}
		return nil, fmt.Errorf("reach Kafka at %v: %w; check that the broker runs, that --kafka is right and whether it needs --kafka-tls or --kafka-sasl", brokers, err)
	}
	return cl, nil
}

// producerOpts are the producer settings capture uses: idempotent (the
// franz-go default, with acks from all in-sync replicas), compressed, with a
// short linger so rows are batched without adding visible latency.
//
// Compression is snappy (franz-go's S2 encoder in its snappy form): it costs
// walhouse about a quarter of what lz4 does per byte, and walhouse plus the
// broker spend less CPU in total per record than with lz4, zstd or none
// (make bench-capture with -phases produce compares them), for batches
// about 40% larger than lz4's. A record is mostly repeated envelope (field
// names, source, schemaId), which every codec compresses several times.
//
// During a snapshot the producer is saturated, so batches fill up to
// ProducerBatchMaxBytes whatever the linger; the linger only matters for
// the trickle of streamed changes, where it bounds the added latency.
// ProducerBatchMaxBytes counts bytes before compression and must stay
// within the topics' max.message.bytes (1 MB by default), since a batch of
// incompressible values stays that large.
func producerOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.RecordPartitioner(capture.Partitioner()),
		kgo.ProducerBatchCompression(kgo.SnappyCompression(), kgo.NoCompression()),
		kgo.ProducerLinger(5 * time.Millisecond),
		kgo.ProducerBatchMaxBytes(1 << 20),
		kgo.MaxBufferedRecords(100_000),
		kgo.MaxBufferedBytes(48 << 20), // bounds memory when the broker is slower than PostgreSQL
		kgo.RecordDeliveryTimeout(0),   // retry until acknowledged; capture's own bound pauses reading
		// A topic capture has just created is often unknown to the first
		// metadata answer; the default 5 s between metadata queries then
		// stalls its first records for up to 5 s.
		kgo.MetadataMinAge(250 * time.Millisecond),
	}
}
