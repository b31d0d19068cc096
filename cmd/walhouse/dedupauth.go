package main

import (
	"context"
	"errors"
	"flag"

	"github.com/walhouse/walhouse/dedup"
	"github.com/walhouse/walhouse/pipeline"
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

// openDedup opens the dedup store of cfg with the login and TLS of sec
// (pipeline.OpenDedup).
func openDedup(ctx context.Context, cfg dedup.Config, sec *dedupSecurity) (*dedup.Store, error) {
	if err := sec.apply(&cfg); err != nil {
		return nil, err
	}
	return pipeline.OpenDedup(ctx, cfg)
}
