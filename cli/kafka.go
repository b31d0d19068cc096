package cli

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/kafka"
)

// KafkaSecurity holds the flags for TLS and SASL, which managed Kafka
// services (and most production clusters) require. The SASL password is
// read from the environment or a file, never from a flag, so that it does
// not show in the process list.
type KafkaSecurity struct {
	// TLS are the --kafka-tls flags.
	TLS TLSFlags
	// Mechanism is the SASL mechanism of --kafka-sasl; empty: no SASL.
	Mechanism    string
	user         string
	passwordFile string
	// passwordEnv holds the SASL password (default
	// WALHOUSE_KAFKA_SASL_PASSWORD; a configuration file's
	// kafka.sasl.password_env names another).
	passwordEnv []string
}

// Register registers the --kafka-tls and --kafka-sasl flags on fs, bound
// to k.
func (k *KafkaSecurity) Register(fs *flag.FlagSet) {
	k.TLS.register(fs, "kafka", "the Kafka brokers", "")
	fs.StringVar(&k.Mechanism, "kafka-sasl", "", "SASL mechanism: plain, scram-sha-256 or scram-sha-512; the password comes from WALHOUSE_KAFKA_SASL_PASSWORD or --kafka-sasl-password-file")
	fs.StringVar(&k.user, "kafka-sasl-user", "", "SASL user name")
	fs.Var(&secretFlag{file: &k.passwordFile, env: &k.passwordEnv}, "kafka-sasl-password-file", "file holding the SASL password")
}

// options returns the client options the flags ask for, or every problem
// with them at once.
func (k *KafkaSecurity) options() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	var errs []error
	if k.TLS.Enabled() {
		cfg, err := k.TLS.config("kafka")
		if err != nil {
			errs = append(errs, err)
		} else {
			opts = append(opts, kgo.DialTLSConfig(cfg))
		}
	}
	mech := strings.ToLower(strings.TrimSpace(k.Mechanism))
	password, err := k.password().Value()
	if err != nil {
		errs = append(errs, err)
	}
	switch {
	case mech != "" && mech != "plain" && mech != "scram-sha-256" && mech != "scram-sha-512":
		errs = append(errs, fmt.Errorf("--kafka-sasl %q: want plain, scram-sha-256 or scram-sha-512", k.Mechanism))
	case mech == "" && k.user != "":
		errs = append(errs, errors.New("--kafka-sasl-user is set but --kafka-sasl is not: name the mechanism (plain, scram-sha-256 or scram-sha-512)"))
	case mech == "":
	case k.user == "" || password == "":
		errs = append(errs, fmt.Errorf("--kafka-sasl %s needs --kafka-sasl-user and a password (WALHOUSE_KAFKA_SASL_PASSWORD or --kafka-sasl-password-file)", mech))
	default:
		opt, err := kafka.SASL(mech, k.user, password)
		if err != nil {
			errs = append(errs, fmt.Errorf("--kafka-sasl: %w", err))
		} else {
			opts = append(opts, opt)
		}
	}
	return opts, errors.Join(errs...)
}

// password is where the SASL password comes from.
func (k *KafkaSecurity) password() *SecretSource {
	env := k.passwordEnv
	if len(env) == 0 {
		env = secretEnv("kafka-sasl-password-file")
	}
	return &SecretSource{env: env, fileFlag: "kafka-sasl-password-file", file: k.passwordFile}
}
