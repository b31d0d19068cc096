package cli

import (
	"errors"
	"flag"

	"github.com/walhouse/walhouse/dedup"
)

// DedupSecurity holds the flags that log in to the dedup store (Valkey or
// Redis AUTH, with an ACL user or the default one) and secure the
// connection with TLS. The password comes from the environment or a file,
// never from a flag.
type DedupSecurity struct {
	user     string
	password *SecretSource
	// TLS are the --dedup-tls flags.
	TLS TLSFlags
}

// Register registers --dedup-user, --dedup-password-file and the
// --dedup-tls flags on fs, bound to d.
func (d *DedupSecurity) Register(fs *flag.FlagSet) {
	fs.StringVar(&d.user, "dedup-user", "", "dedup store ACL user (empty: the default user); the password comes from WALHOUSE_DEDUP_PASSWORD or --dedup-password-file")
	d.password = RegisterSecret(fs, "dedup-password-file", "the dedup store's password")
	d.TLS.register(fs, "dedup", "the dedup store", " and by a rediss:// --dedup-addr")
}

// Apply sets the login and TLS of the flags in cfg, or returns every
// problem with them at once.
func (d *DedupSecurity) Apply(cfg *dedup.Config) error {
	var errs []error
	password, err := d.password.Value()
	if err != nil {
		errs = append(errs, err)
	}
	cfg.Username, cfg.Password = d.user, password
	if d.TLS.Enabled() {
		tc, err := d.TLS.config("dedup")
		if err != nil {
			errs = append(errs, err)
		}
		cfg.TLS = tc
	}
	return errors.Join(errs...)
}
