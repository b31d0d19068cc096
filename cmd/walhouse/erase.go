package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/walhouse/walhouse/cli"
	"github.com/walhouse/walhouse/erasure"
	"github.com/walhouse/walhouse/pipeline"
)

// runErase erases a data subject (erasure.Eraser), or verifies the
// manifest of an erasure, or prints the key that verifies manifests.
func runErase(ctx context.Context, inv *cli.Invocation) error {
	sub, file := "run", ""
	if len(inv.Args) > 0 && !strings.HasPrefix(inv.Args[0], "-") {
		sub, inv.Args = inv.Args[0], inv.Args[1:]
	}
	if sub == "verify" && len(inv.Args) > 0 && !strings.HasPrefix(inv.Args[0], "-") {
		file, inv.Args = inv.Args[0], inv.Args[1:] // before or after the flags
	}
	fs, ep := cli.NewFlagSet("erase", cli.UsesPG|cli.UsesClickHouse)
	subj := cli.RegisterSubject(fs, "ClickHouse tables to erase from")
	var (
		out       = fs.String("out", "", "file for the signed manifest (created 0600; default: standard output)")
		settle    = fs.Duration("settle", erasure.DefaultSettle, "wait between recording the ledger entry and removing rows, so every sink has read it; more than the sinks' --erasure-max-age plus an insert's duration (docs/erasure.md)")
		maxRows   = fs.Int("max-rows", erasure.DefaultMaxRows, "refuse a subject with more rows than this in ClickHouse (a common value, not a data subject); raise it to force a broad erasure")
		publicKey = fs.String("public-key", "", "with verify: the hex ed25519 key that signed the manifest (walhouse erase public-key prints it); default: derived from the erasure key")
	)
	keySrc := registerErasureKey(fs)
	if err := inv.Parse(fs); err != nil {
		return err
	}
	switch sub {
	case "run":
	case "verify":
		if file == "" && fs.NArg() == 1 {
			file = fs.Arg(0)
		} else if file == "" || fs.NArg() > 0 {
			return cli.Usagef("erase verify takes one manifest file")
		}
		return eraseVerify(inv, file, *publicKey, keySrc)
	case "public-key":
		return printPublicKey(inv, keySrc)
	default:
		return cli.Usagef("unknown subcommand %q: want none (erase), verify FILE or public-key", sub)
	}
	if fs.NArg() > 0 {
		return cli.Usagef("unexpected arguments %q", fs.Args())
	}
	if err := subj.Require(ep.PG); err != nil {
		return err
	}
	if *maxRows < 1 {
		return cli.Usagef("--max-rows %d: want a positive number", *maxRows)
	}
	keys, err := erasureKeys(keySrc)
	if err != nil {
		return err
	}
	if keys == nil {
		return cli.Usagef("no erasure key: set WALHOUSE_ERASURE_KEY or --erasure-key-file (the sinks need the same key)")
	}
	pg, err := openPG(ctx, ep, ep.PG)
	if err != nil {
		return err
	}
	defer pg.Close()
	conn, err := openClickHouse(ctx, ep)
	if err != nil {
		return err
	}
	defer conn.Close()
	er, err := erasure.NewEraser(erasure.Config{PG: pg, Conn: conn, Database: ep.Database, Keys: *keys, Settle: *settle, MaxRows: *maxRows})
	if err != nil {
		return err
	}
	w := inv.Stdout
	if *out != "" {
		f, err := pipeline.CreatePrivate(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	m, err := er.Erase(ctx, erasure.Request{Tenant: subj.Tenant, Column: subj.Column, Value: subj.Value, Tables: subj.Tables, RequestedBy: "cli"})
	return writeManifest(w, m, err)
}

// writeManifest writes a signed manifest m to w (none when the erasure
// was refused before it began), and returns the erasure's error eraseErr
// with the writing's.
func writeManifest(w io.Writer, m erasure.Manifest, eraseErr error) error {
	if m.Signature == "" {
		return eraseErr
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if werr := enc.Encode(m); werr != nil {
		return errors.Join(eraseErr, fmt.Errorf("write the manifest: %w", werr))
	}
	return eraseErr
}

// printPublicKey prints the hex key that verifies manifests signed with
// the erasure key of keySrc.
func printPublicKey(inv *cli.Invocation, keySrc *cli.SecretSource) error {
	keys, err := erasureKeys(keySrc)
	if err != nil {
		return err
	}
	if keys == nil {
		return cli.Usagef("no erasure key: set WALHOUSE_ERASURE_KEY or --erasure-key-file")
	}
	fmt.Fprintln(inv.Stdout, hex.EncodeToString(keys.PublicKey()))
	return nil
}

// eraseVerify checks the signature of a manifest file and prints what it
// says.
func eraseVerify(inv *cli.Invocation, file, publicKey string, keySrc *cli.SecretSource) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var pub ed25519.PublicKey
	if publicKey != "" {
		if pub, err = hex.DecodeString(publicKey); err != nil || len(pub) != ed25519.PublicKeySize {
			return cli.Usagef("--public-key: want %d hex digits", 2*ed25519.PublicKeySize)
		}
	} else {
		keys, err := erasureKeys(keySrc)
		if err != nil {
			return err
		}
		if keys == nil {
			return cli.Usagef("give --public-key, or the erasure key (WALHOUSE_ERASURE_KEY or --erasure-key-file)")
		}
		pub = keys.PublicKey()
	}
	m, err := erasure.VerifyManifest(data, pub)
	if err != nil {
		return err
	}
	var removed uint64
	for _, t := range m.Tables {
		removed += t.Removed
	}
	state := "verified: no version left"
	if !m.Verified {
		state = "NOT verified: versions were left"
	}
	fmt.Fprintf(inv.Stdout, "signature OK: erasure %s of tenant %s, %d versions removed from %d tables as of LSN %s, %s (%s)\n",
		m.ID, m.Tenant, removed, len(m.Tables), m.AsOfLSN, state, m.FinishedAt.Format(time.RFC3339))
	if !m.Verified {
		return errors.New("the manifest records an erasure that left versions behind")
	}
	return nil
}

// registerErasureKey registers --erasure-key-file (env
// WALHOUSE_ERASURE_KEY, WALHOUSE_ERASURE_KEY_FILE).
func registerErasureKey(fs *flag.FlagSet) *cli.SecretSource {
	return cli.RegisterSecret(fs, "erasure-key-file", "the erasure key (16+ bytes): the key of the erasure ledger's hashes and manifest signatures; the same for every sink, serve and walhouse erase")
}

// erasureKeys derives the erasure keys from the secret, nil when none was
// given.
func erasureKeys(src *cli.SecretSource) (*erasure.Keys, error) {
	secret, err := src.Value()
	if err != nil || secret == "" {
		return nil, err
	}
	keys, err := erasure.NewKeys([]byte(secret))
	if err != nil {
		return nil, err
	}
	return &keys, nil
}
