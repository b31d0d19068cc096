package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/walhouse/walhouse/cli"
	"github.com/walhouse/walhouse/query"
)

// runAPIKey manages the query API's keys in serve's keys file (--keys,
// key api.keys_file): create adds a key and prints its secret once, list
// shows each key's id, tenant and scopes, revoke removes one. The file
// keeps only each key's SHA-256; serve reads it at start, so a change
// takes effect when serve restarts. These are the query API's keys, not
// Layer 1's idempotency keys (walhouse keys prune).
func runAPIKey(_ context.Context, inv *cli.Invocation) error {
	sub := inv.Subcommand()
	var id string
	if sub == "revoke" && len(inv.Args) > 0 && !strings.HasPrefix(inv.Args[0], "-") {
		id, inv.Args = inv.Args[0], inv.Args[1:]
	}
	fset, _ := cli.NewFlagSet("apikey", 0)
	file := fset.String("keys", "", "JSON file of API keys that walhouse serve reads: [{\"id\",\"hash\",\"tenant\",\"scopes\"}]; created by the first apikey create")
	tenant := fset.String("tenant", "", "create: the only tenant the key may read, export or erase (required for those scopes)")
	scopes := fset.String("scopes", "read", "create: comma-separated scopes: read, export, erase, admin")
	newID := fset.String("id", "", "create: the key's id, by which list and revoke name it (default key-<UTC time>)")
	if err := inv.Parse(fset); err != nil {
		return err
	}
	if sub != "create" && sub != "list" && sub != "revoke" {
		return cli.Usagef("want a subcommand: create, list or revoke ID")
	}
	if *file == "" {
		return cli.Usagef("--keys is required%s", cli.OtherSources("apikey", fset.Lookup("keys")))
	}
	switch sub {
	case "create":
		return createAPIKey(inv, *file, *newID, *tenant, *scopes)
	case "list":
		return listAPIKeys(inv, *file)
	case "revoke":
		if id == "" {
			return cli.Usagef("apikey revoke needs the key's id: walhouse apikey revoke ID --keys FILE")
		}
		return revokeAPIKey(inv, *file, id)
	default:
		return cli.Usagef("want a subcommand: create, list or revoke ID")
	}
}

func createAPIKey(inv *cli.Invocation, path, id, tenant, scopes string) error {
	list, err := query.ReadKeyList(path)
	if err != nil {
		return err
	}
	if id == "" {
		id = "key-" + time.Now().UTC().Format("20060102-150405")
	}
	if slices.ContainsFunc(list, func(k query.Key) bool { return k.ID == id }) {
		return cli.Usagef("--id %q: %s already has a key with this id; revoke it first or pick another", id, path)
	}
	secret, err := query.NewSecret()
	if err != nil {
		return err
	}
	key := query.Key{ID: id, Hash: query.HashKey(secret), Tenant: tenant}
	for _, s := range cli.SplitList(scopes) {
		key.Scopes = append(key.Scopes, query.Scope(s))
	}
	b, err := json.Marshal([]query.Key{key})
	if err != nil {
		return err
	}
	if _, err := query.ParseKeys(b); err != nil {
		return cli.Usage(err)
	}
	if err := query.WriteKeyList(path, append(list, key)); err != nil {
		return err
	}
	fmt.Fprintf(inv.Stdout, "%s\n", secret)
	fmt.Fprintf(inv.Stderr, "apikey: added %q (tenant %q, scopes %s) to %s; the key above is shown once and not stored. walhouse serve reads the file at start: restart it to accept the key.\n", id, tenant, scopes, path)
	return nil
}

func listAPIKeys(inv *cli.Invocation, path string) error {
	list, err := query.ReadKeyList(path)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(inv.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTENANT\tSCOPES")
	for _, k := range list {
		var scopes []string
		for _, s := range k.Scopes {
			scopes = append(scopes, string(s))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", k.ID, k.Tenant, strings.Join(scopes, ","))
	}
	return tw.Flush()
}

func revokeAPIKey(inv *cli.Invocation, path, id string) error {
	list, err := query.ReadKeyList(path)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(list, func(k query.Key) bool { return k.ID == id })
	if i < 0 {
		var ids bytes.Buffer
		for _, k := range list {
			fmt.Fprintf(&ids, " %s", k.ID)
		}
		return fmt.Errorf("%s has no key %q (its ids:%s)", path, id, ids.String())
	}
	if err := query.WriteKeyList(path, slices.Delete(list, i, i+1)); err != nil {
		return err
	}
	fmt.Fprintf(inv.Stderr, "apikey: removed %q from %s; walhouse serve reads the file at start: restart it to refuse the key.\n", id, path)
	return nil
}
