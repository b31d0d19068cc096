// Package redact masks passwords in connection strings, URLs and any text
// that may quote one (errors of database drivers, log lines), so that
// walhouse never prints a secret, whatever form the DSN took.
//
// It knows the forms walhouse's services use: a URL's user:password@
// (postgres://, clickhouse://, http://, redis://, rediss://, …), password
// query parameters (?password=…, and http_proxy, which may hold one), and
// libpq's keyword/value form (password=… and sslpassword=…, quoted or not).
// A password is replaced by "xxxxx"; everything else stays readable.
//
// It owns no state: text enters through String (or a log attribute through
// SlogAttr) and leaves with its passwords masked. The command line
// (package cli, which runs cmd/walhouse's commands) applies Error to every
// error it prints and SlogAttr to every log attribute; monitor masks
// capture URLs with it.
package redact
