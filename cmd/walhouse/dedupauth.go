package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"

	"github.com/walhouse/walhouse/dedup"
)

// dedupSecurity holds the flags that log in to the dedup store (Valkey or
// Redis AUTH, with an ACL user or the default one) and secure the
// connection with TLS. The password comes from the environment or a file,
// never from a flag.
type dedupSecurity struct {
	user     string
	password *secretSource
	tls      tlsFlags
}

func (d *dedupSecurity) register(fs *flag.FlagSet) {
	fs.StringVar(&d.user, "dedup-user", "", "dedup store ACL user (empty: the default user); the password comes from WALHOUSE_DEDUP_PASSWORD or --dedup-password-file")
	d.password = registerSecret(fs, "dedup-password-file", "the dedup store's password")
	d.tls.register(fs, "dedup", "the dedup store", " and by a rediss:// --dedup-addr")
}

// apply sets the login and TLS of the flags in cfg, or returns every
// problem with them at once.
func (d *dedupSecurity) apply(cfg *dedup.Config) error {
	var errs []error
	password, err := d.password.value()
	if err != nil {
		errs = append(errs, err)
	}
	cfg.Username, cfg.Password = d.user, password
	if d.tls.enabled() {
		tc, err := d.tls.config("dedup")
		if err != nil {
			errs = append(errs, err)
		}
		cfg.TLS = tc
	}
	return errors.Join(errs...)
}

// openDedup opens the dedup store and checks it at start: a refused login
// or a certificate that does not verify stop the sink with the fix, since
// retrying never helps; a store that does not answer only means starting
// in fail-open mode, as when it fails later.
func openDedup(ctx context.Context, cfg dedup.Config, sec *dedupSecurity) (*dedup.Store, error) {
	if err := sec.apply(&cfg); err != nil {
		return nil, err
	}
	store, err := dedup.New(cfg)
	if err != nil {
		return nil, err
	}
	err = store.Ping(ctx)
	switch {
	case err == nil:
		return store, nil
	case errors.Is(err, dedup.ErrAuth):
		store.Close()
		return nil, fmt.Errorf("%w; check --dedup-user and the password (WALHOUSE_DEDUP_PASSWORD or --dedup-password-file)", err)
	case certificateError(err):
		store.Close()
		return nil, fmt.Errorf("%w; the dedup store's certificate did not verify: give the CA that signed it with --dedup-tls-ca, and name the store in --dedup-addr as its certificate does", err)
	default:
		slog.Warn("sink: the dedup store does not answer; starting without Layer 2 (fail open) until it does", "err", err)
		return store, nil
	}
}
