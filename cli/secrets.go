package cli

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// Secrets never come from a flag's value, which shows in the process list
// (and, as a default taken from the environment, in -h). Each one comes
// from a file named by --x-file (or its variable, WALHOUSE_…_FILE) or from
// the variable that holds the secret itself (the same name without _FILE);
// the file wins when both are set.

// SecretSource is where one secret may come from.
type SecretSource struct {
	// env are the variables that may hold the secret itself, the current
	// name first, then its deprecated ones.
	env      []string
	fileFlag string // flag naming a file that holds it
	file     string
}

// RegisterSecret registers --<fileFlag> on fs: the secret is in the file
// it names, or else in the variable of the flag's key without _FILE.
func RegisterSecret(fs *flag.FlagSet, fileFlag, what string) *SecretSource {
	s := &SecretSource{env: secretEnv(fileFlag), fileFlag: fileFlag}
	fs.Var(&secretFlag{file: &s.file, env: &s.env}, fileFlag, fmt.Sprintf("file holding %s (or the secret itself in env %s)", what, s.env[0]))
	return s
}

// secretFlag is the value of a --…-file flag. A configuration file may
// name, instead of a file, another environment variable that holds the
// secret (a …_env key): useEnv points the secret there.
type secretFlag struct {
	file *string
	env  *[]string
}

func (f *secretFlag) String() string {
	if f == nil || f.file == nil {
		return ""
	}
	return *f.file
}

func (f *secretFlag) Set(v string) error {
	*f.file = v
	return nil
}

// useEnv makes name the environment variable that holds the secret.
func (f *secretFlag) useEnv(name string) { *f.env = []string{name} }

// Value returns the secret, "" when neither source is set. A file's
// trailing line break is not part of it.
func (s *SecretSource) Value() (string, error) {
	if s.file == "" {
		return getSecretEnv(s.env), nil
	}
	b, err := os.ReadFile(s.file)
	if err != nil {
		return "", fmt.Errorf("--%s: %w", s.fileFlag, err)
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", fmt.Errorf("--%s: %s is empty", s.fileFlag, s.file)
	}
	return v, nil
}

// withPassword returns dsn with password added, for the services whose
// DSN is the only way to pass one: a URL gets a password query parameter
// (which pgx and clickhouse-go read after the user:password@ part), a
// libpq keyword/value string a quoted password=. A dsn that already holds
// a password is refused: two sources for one secret is a mistake to point
// out, not to settle silently. flagName names the DSN's flag in errors.
func withPassword(dsn, password, flagName string) (string, error) {
	if password == "" {
		return dsn, nil
	}
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("--%s is not a valid URL; give the password in one place only", flagName)
		}
		q := u.Query()
		if _, has := u.User.Password(); has || q.Has("password") {
			return "", fmt.Errorf("--%s already holds a password and one was given from a file or the environment as well: keep only one", flagName)
		}
		q.Set("password", password)
		// pgx reads "+" in a query as itself, not as a space: %20 means a
		// space to every reader (QueryEscape wrote a literal "+" as %2B).
		u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
		return u.String(), nil
	}
	for _, field := range strings.Fields(dsn) {
		if k, _, ok := strings.Cut(field, "="); ok && strings.TrimSpace(k) == "password" {
			return "", fmt.Errorf("--%s already holds a password and one was given from a file or the environment as well: keep only one", flagName)
		}
	}
	quoted := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(password)
	return strings.TrimSpace(dsn + " password='" + quoted + "'"), nil
}

// TLSFlags are the TLS flags of one service: --NAME-tls, --NAME-tls-ca,
// --NAME-tls-cert and --NAME-tls-key.
type TLSFlags struct {
	on        bool
	ca        string
	cert, key string
}

// register registers the TLS flags of the service name (kafka, dedup).
// servers names the service's servers in the help, and implied what else
// turns TLS on (" and by …", or "").
func (t *TLSFlags) register(fs *flag.FlagSet, name, servers, implied string) {
	fs.BoolVar(&t.on, name+"-tls", false, fmt.Sprintf("connect to %s over TLS (implied by the other --%s-tls-* flags%s)", servers, name, implied))
	fs.StringVar(&t.ca, name+"-tls-ca", "", fmt.Sprintf("PEM file of the CAs that sign the certificates of %s (default: the system's)", servers))
	fs.StringVar(&t.cert, name+"-tls-cert", "", "PEM client certificate, for servers that require mutual TLS")
	fs.StringVar(&t.key, name+"-tls-key", "", fmt.Sprintf("PEM private key of --%s-tls-cert", name))
}

// Enabled reports whether TLS is on: asked for, or implied by a file.
func (t TLSFlags) Enabled() bool { return t.on || t.ca != "" || t.cert != "" || t.key != "" }

// config builds the TLS client configuration of the flags of the service
// name from their PEM files: the CAs (default: the system's) and, for
// mutual TLS, the client certificate and key.
func (t TLSFlags) config(name string) (*tls.Config, error) {
	prefix := "--" + name + "-tls"
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.ca != "" {
		pem, err := os.ReadFile(t.ca)
		if err != nil {
			return nil, fmt.Errorf("%s-ca: %w", prefix, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s-ca %s holds no PEM certificate", prefix, t.ca)
		}
		cfg.RootCAs = pool
	}
	if (t.cert == "") != (t.key == "") {
		return nil, fmt.Errorf("%[1]s-cert and %[1]s-key go together: give both for mutual TLS, or neither", prefix)
	}
	if t.cert != "" {
		pair, err := tls.LoadX509KeyPair(t.cert, t.key)
		if err != nil {
			return nil, fmt.Errorf("%[1]s-cert/%[1]s-key: %w", prefix, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
