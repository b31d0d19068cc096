package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/dedup"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/pipeline"
)

// Against the local broker's SASL/PLAIN listener: the right password
// produces and consumes a record, a wrong one and none at all fail at
// start with an error that says what failed, instead of retrying forever.
func TestIntegrationKafkaSASL(t *testing.T) {
	env := testenv.Require(t, "kafka-sasl")
	plainUser := KafkaSecurity{Mechanism: "plain", user: "walhouse"}
	checkKafkaSecurity(t, env.KafkaSASL, "SASL", plainUser, map[string]refusal{
		"wrong password": {"nope", plainUser, []string{"check --kafka-sasl-user and the password"}},
		"no SASL":        {"", KafkaSecurity{}, []string{"--kafka-sasl"}},
	})
}

// Against the local broker's SASL_SSL listener, whose certificate a
// throwaway CA signed: with that CA and the right password a record goes
// through over TLS; trusting only the system's CAs fails at start with an
// error that names the certificate problem and --kafka-tls-ca; a wrong
// password over TLS fails with the login message.
func TestIntegrationKafkaTLS(t *testing.T) {
	env := testenv.Require(t, "kafka-tls")
	withCA := KafkaSecurity{TLS: TLSFlags{on: true, ca: env.KafkaTLSCA}, Mechanism: "plain", user: "walhouse"}
	checkKafkaSecurity(t, env.KafkaTLS, "TLS", withCA, map[string]refusal{
		"system CAs only": {"walhouse-local", KafkaSecurity{TLS: TLSFlags{on: true}, Mechanism: "plain", user: "walhouse"}, []string{"certificate", "--kafka-tls-ca"}},
		"wrong password":  {"nope", withCA, []string{"check --kafka-sasl-user and the password"}},
	})
}

// refusal is a connection that must fail at start with an error that
// mentions each of want.
type refusal struct {
	password string
	sec      KafkaSecurity
	want     []string
}

// checkKafkaSecurity connects to brokers with good and the password
// walhouse-local, creates a topic, produces and consumes a record over the
// connection (named via in messages), then checks each refusal.
func checkKafkaSecurity(t *testing.T, brokers, via string, good KafkaSecurity, refusals map[string]refusal) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := func(password string, sec KafkaSecurity, opts ...kgo.Opt) (*kgo.Client, error) {
		t.Setenv("WALHOUSE_KAFKA_SASL_PASSWORD", password)
		secOpts, err := sec.options()
		if err != nil {
			return nil, err
		}
		return kafka.NewClient(ctx, kafka.Config{Brokers: strings.Split(brokers, ","), Security: secOpts}, opts...)
	}

	topic := testenv.Name(strings.ToLower(via))
	cl, err := connect("walhouse-local", good, kgo.DefaultProduceTopic(topic), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatalf("connect over %s with the right settings: %v", via, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatalf("create %s over %s: %v", topic, via, err)
	}
	t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), topic) })
	value := "over " + via
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(value)}).FirstErr(); err != nil {
		t.Fatalf("produce over %s: %v", via, err)
	}
	fs := cl.PollFetches(ctx)
	if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != value {
		t.Fatalf("consumed %v (errors %v), want the record produced", recs, fs.Errors())
	}

	for name, tc := range refusals {
		start := time.Now()
		cl, err := connect(tc.password, tc.sec)
		if err == nil {
			cl.Close()
			t.Errorf("%s: connected", name)
			continue
		}
		t.Logf("%s: failed after %v: %v", name, time.Since(start).Round(time.Millisecond), err)
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q, want it to mention %q", name, err, w)
			}
		}
	}
}

// Against the local Redis's TLS listener (a throwaway CA, ACL user
// walhouse): the right user, password and CA remember and find an
// eventId, also with a client certificate and with everything in a
// rediss:// URL; a wrong password and a certificate from an unknown CA fail
// at start with the fix instead of a silent fail-open.
func TestIntegrationDedupAuthTLS(t *testing.T) {
	env := testenv.Require(t, "redis-tls")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte("walhouse-local\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		addr     string
		password string
		sec      DedupSecurity
		want     []string // parts of the error; none: the store works
		auth     bool     // the error is dedup.ErrAuth
	}{
		"user, password and CA":       {env.RedisTLS, "walhouse-local", DedupSecurity{user: "walhouse", TLS: TLSFlags{ca: env.RedisTLSCA}}, nil, false},
		"password from a file":        {env.RedisTLS, "", DedupSecurity{user: "walhouse", password: &SecretSource{file: pwFile}, TLS: TLSFlags{ca: env.RedisTLSCA}}, nil, false},
		"client certificate":          {env.RedisTLS, "walhouse-local", DedupSecurity{user: "walhouse", TLS: TLSFlags{ca: env.RedisTLSCA, cert: env.RedisTLSClientCert, key: env.RedisTLSClientKey}}, nil, false},
		"rediss URL":                  {"rediss://walhouse:walhouse-local@" + env.RedisTLS, "", DedupSecurity{TLS: TLSFlags{ca: env.RedisTLSCA}}, nil, false},
		"wrong password":              {env.RedisTLS, "nope", DedupSecurity{user: "walhouse", TLS: TLSFlags{ca: env.RedisTLSCA}}, []string{"refused the login", "check --dedup-user and the password"}, true},
		"wrong password in a URL":     {"rediss://walhouse:nope@" + env.RedisTLS, "", DedupSecurity{TLS: TLSFlags{ca: env.RedisTLSCA}}, []string{"check --dedup-user and the password"}, true},
		"system CAs only":             {env.RedisTLS, "walhouse-local", DedupSecurity{user: "walhouse", TLS: TLSFlags{on: true}}, []string{"certificate", "--dedup-tls-ca"}, false},
		"rediss URL, system CAs only": {"rediss://walhouse:walhouse-local@" + env.RedisTLS, "", DedupSecurity{}, []string{"--dedup-tls-ca"}, false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("WALHOUSE_DEDUP_PASSWORD", tc.password)
			if tc.sec.password == nil {
				tc.sec.password = &SecretSource{}
			}
			tc.sec.password.env, tc.sec.password.fileFlag = secretEnv("dedup-password-file"), "dedup-password-file"
			store, err := openDedup(ctx, dedup.Config{Addr: tc.addr, Prefix: testenv.Name("dedup") + ":"}, &tc.sec)
			if len(tc.want) > 0 {
				if err == nil {
					store.Close()
					t.Fatal("connected")
				}
				t.Logf("refused: %v", err)
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q, want it to mention %q", err, w)
					}
				}
				if errors.Is(err, dedup.ErrAuth) != tc.auth {
					t.Errorf("errors.Is(err, dedup.ErrAuth) = %v, want %v", !tc.auth, tc.auth)
				}
				if strings.Contains(err.Error(), "walhouse-local") || strings.Contains(err.Error(), "nope") {
					t.Errorf("error %q holds a password", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			if err := store.Remember(ctx, []string{"e1"}, []string{"h1"}); err != nil {
				t.Fatal(err)
			}
			got, err := store.Lookup(ctx, []string{"e1", "e2"})
			if err != nil || len(got) != 2 || got[0] != "h1" || got[1] != "" {
				t.Fatalf("Lookup = %q, %v; want [h1 \"\"]", got, err)
			}
		})
	}
}

// openDedup opens the dedup store of cfg with the login and TLS of sec,
// as the sink and the demo do.
func openDedup(ctx context.Context, cfg dedup.Config, sec *DedupSecurity) (*dedup.Store, error) {
	if err := sec.Apply(&cfg); err != nil {
		return nil, err
	}
	return pipeline.OpenDedup(ctx, cfg)
}
