package redact

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"postgres URL", "postgres://walhouse:s3cret@db:5432/app?sslmode=require", "postgres://walhouse:xxxxx@db:5432/app?sslmode=require"},
		{"postgresql URL, @ and : in the password", "postgresql://u:p@ss:w@rd@db/app", "postgresql://u:xxxxx@db/app"},
		{"password parameter", "postgres://db/app?user=u&password=s3cret&sslmode=disable", "postgres://db/app?user=u&password=xxxxx&sslmode=disable"},
		{"password parameter first", "postgres://db/app?password=s3cret", "postgres://db/app?password=xxxxx"},
		{"password with a raw &", "clickhouse://h:9000/db?password=a&b&c&secure=true", "clickhouse://h:9000/db?password=xxxxx&secure=true"},
		{"keyword/value", "host=db user=u password=s3cret dbname=app", "host=db user=u password=xxxxx dbname=app"},
		{"keyword/value quoted", `host=db password='s3 c\'ret' dbname=app`, "host=db password=xxxxx dbname=app"},
		{"keyword/value spaced, first", "password = s3cret host=db", "password = xxxxx host=db"},
		{"sslpassword", "host=db sslpassword=s3cret", "host=db sslpassword=xxxxx"},
		{"clickhouse native", "clickhouse://default:s3cret@ch:9000/walhouse", "clickhouse://default:xxxxx@ch:9000/walhouse"},
		{"clickhouse username/password params", "clickhouse://ch:9000?username=u&password=s3cret", "clickhouse://ch:9000?username=u&password=xxxxx"},
		{"http with password param", "http://ch:8123/?user=u&password=s3cret#x", "http://ch:8123/?user=u&password=xxxxx#x"},
		{"http_proxy with credentials", "http://ch:8123/?http_proxy=http%3A%2F%2Fu%3Ap%40proxy", "http://ch:8123/?http_proxy=xxxxx"},
		{"redis URL", "redis://walhouse:s3cret@cache:6379/0", "redis://walhouse:xxxxx@cache:6379/0"},
		{"rediss URL without user", "rediss://:s3cret@cache:6380", "rediss://:xxxxx@cache:6380"},
		{"in an error message", `parse "postgres://u:s3cret@db/app": invalid port`, `parse "postgres://u:xxxxx@db/app": invalid port`},
		{"two DSNs", "from postgres://a:one@x to clickhouse://b:two@y", "from postgres://a:xxxxx@x to clickhouse://b:xxxxx@y"},
		{"user without password", "postgres://walhouse@db/app", "postgres://walhouse@db/app"},
		{"nothing secret", "host:port 127.0.0.1:9092 a=b", "host:port 127.0.0.1:9092 a=b"},
		{"not a password keyword", "passwordless=true", "passwordless=true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := String(tc.in)
			if got != tc.want {
				t.Errorf("String(%q)\n got %q\nwant %q", tc.in, got, tc.want)
			}
			for _, secret := range []string{"s3cret", "one", "two", "c\\'ret"} {
				if strings.Contains(tc.in, secret) && strings.Contains(got, secret) {
					t.Errorf("String(%q) = %q still holds %q", tc.in, got, secret)
				}
			}
		})
	}
}

func TestError(t *testing.T) {
	if Error(nil) != nil {
		t.Fatal("Error(nil) is not nil")
	}
	plain := errors.New("no secret here")
	if Error(plain) != plain {
		t.Error("an error without a password was wrapped")
	}
	err := Error(&fs.PathError{Op: "open", Path: "postgres://u:s3cret@db", Err: fs.ErrNotExist})
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Error kept the password: %v", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Error("Error broke errors.Is")
	}
}

func TestSlogAttr(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: SlogAttr}))
	log.Info("connect to postgres://u:s3cret@db failed",
		"dsn", "host=db password=s3cret",
		"err", errors.New("dial clickhouse://default:s3cret@ch:9000"),
		slog.Group("g", "url", "redis://:s3cret@cache"),
		"n", 3)
	if out := buf.String(); strings.Contains(out, "s3cret") || !strings.Contains(out, "n=3") {
		t.Errorf("log line %q", out)
	}
}
