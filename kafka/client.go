package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Config is how to reach Kafka: the seed brokers and the options that
// secure the connection (TLS, SASL), which every client of a command
// shares.
type Config struct {
	Brokers []string
	// Security holds kgo.DialTLSConfig and kgo.SASL as the user asked for
	// them (see SASL); empty for a plaintext cluster without login.
	Security []kgo.Opt
}

// NewClient opens a franz-go client of cfg with opts added and checks that
// a broker answers, so a wrong address, a refused login or a certificate
// that does not verify fails at start with a message that says what to fix
// (naming walhouse's --kafka flags) instead of retrying silently.
//
// A command makes its first client with NewClient and every further one
// with Derive, so they all connect alike.
func NewClient(ctx context.Context, cfg Config, opts ...kgo.Opt) (*kgo.Client, error) {
	brokers := cfg.Brokers
	if len(brokers) == 0 {
		return nil, fmt.Errorf("no Kafka brokers given: set --kafka or WALHOUSE_KAFKA_BROKERS")
	}
	all := append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, cfg.Security...)
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

// Derive returns a new client made from cl's options with opts added: the
// same brokers, TLS, SASL and dialer, so a secondary client (a reader of a
// compacted topic, a consumer next to a producer) connects exactly as the
// first one does. The caller closes it.
//
// cl's options include its role's (a producer's partitioner, a group's
// consumer settings): derive readers of single partitions from clients
// that are not group members.
func Derive(cl *kgo.Client, opts ...kgo.Opt) (*kgo.Client, error) {
	derived, err := kgo.NewClient(append(slices.Clone(cl.Opts()), opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return derived, nil
}

// SASL returns the client option that logs in with mechanism (plain,
// scram-sha-256 or scram-sha-512, in any case) as user.
func SASL(mechanism, user, password string) (kgo.Opt, error) {
	switch strings.ToLower(strings.TrimSpace(mechanism)) {
	case "plain":
		return kgo.SASL(plain.Auth{User: user, Pass: password}.AsMechanism()), nil
	case "scram-sha-256":
		return kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha256Mechanism()), nil
	case "scram-sha-512":
		return kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism()), nil
	}
	return nil, fmt.Errorf("SASL mechanism %q: want plain, scram-sha-256 or scram-sha-512", mechanism)
}

// certificateError reports whether err is a server certificate that did
// not verify (an unknown CA, a name the certificate does not cover):
// retrying never fixes it, and the fix is a CA setting.
func certificateError(err error) bool {
	var certErr *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	return errors.As(err, &certErr) || errors.As(err, &unknown) || errors.As(err, &hostname)
}

// ProducerOpts are the producer settings capture uses: acks from all
// in-sync replicas and idempotent (SafeProducerOpts), compressed, with a
// short linger so rows are batched without adding visible latency, sized
// for records of up to maxRecordBytes (see RecordLimitOpts), placing
// records with placement (capture.Partitioner: capture decides where its
// records go, and its snapshot places row batches by the same rule).
//
// Compression is snappy (franz-go's S2 encoder in its snappy form): it costs
// walhouse about a quarter of what lz4 does per byte, and walhouse plus the
// broker spend less CPU in total per record than with lz4, zstd or none
// (make bench-capture with -phases produce compares them), for batches
// about 40% larger than lz4's. A record is mostly repeated envelope (field
// names, source, schemaId), which every codec compresses several times.
//
// During a snapshot the producer is saturated, so batches fill up to the
// batch limit (RecordLimitOpts) or the buffer, whichever is smaller; the
// linger only matters for the trickle of streamed changes, where it bounds
// the added latency.
func ProducerOpts(maxRecordBytes int, placement kgo.Partitioner) []kgo.Opt {
	return append(append(RecordLimitOpts(maxRecordBytes), SafeProducerOpts()...),
		kgo.RecordPartitioner(placement),
		kgo.ProducerBatchCompression(kgo.SnappyCompression(), kgo.NoCompression()),
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.MaxBufferedRecords(100_000),
		// Bounds memory when the broker is slower than PostgreSQL; a
		// record at the bound must fit, or the client refuses it.
		kgo.MaxBufferedBytes(max(48<<20, MaxMessageBytes(maxRecordBytes))),
		kgo.RecordDeliveryTimeout(0), // retry until acknowledged; capture's own bound pauses reading
		// A topic capture has just created is often unknown to the first
		// metadata answer; the default 5 s between metadata queries then
		// stalls its first records for up to 5 s.
		kgo.MetadataMinAge(250*time.Millisecond),
	)
}

// Request sizes franz-go and Kafka use unless told otherwise: a fetch
// response aims at fetchMaxBytes, and neither side reads or writes a
// request over defaultRequestBytes (the broker's socket.request.max.bytes).
const (
	fetchMaxBytes       = 50 << 20
	defaultRequestBytes = 100 << 20
)

// RecordLimitOpts size a client for records of up to maxRecordBytes of key
// and value, the bound capture enforces (--max-record-bytes): the topics
// walhouse creates hold MaxMessageBytes, and so must every client that
// produces to them (capture, the sink's dead letters, dlq replay) and
// every client that reads them.
//
//   - A batch holds up to MaxMessageBytes before compression (franz-go
//     refuses a larger record outright, and sends a batch uncompressed
//     when compression does not shrink it, so the topic's limit, checked
//     after compression, holds too).
//   - A fetch returns at least one whole batch even when it is larger than
//     the fetch limits (Kafka's KIP-74), so a large record never stalls a
//     consumer; the response is then larger than fetchMaxBytes, and the
//     client must be willing to read it (BrokerMaxReadBytes).
//   - Requests stay at the broker's 100 MiB default unless one record
//     needs more; a bound above about 98 MiB needs the brokers'
//     socket.request.max.bytes raised to match (docs/limits.md).
func RecordLimitOpts(maxRecordBytes int) []kgo.Opt {
	batch := MaxMessageBytes(maxRecordBytes)
	request := max(defaultRequestBytes, batch+Overhead)
	return []kgo.Opt{
		kgo.ProducerBatchMaxBytes(int32(batch)),
		kgo.BrokerMaxWriteBytes(int32(request)),
		kgo.FetchMaxBytes(fetchMaxBytes),
		kgo.BrokerMaxReadBytes(int32(min(fetchMaxBytes+request, math.MaxInt32))),
	}
}
