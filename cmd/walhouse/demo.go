package main

import (
	"context"
	"os"

	"github.com/walhouse/walhouse/cli"
	"github.com/walhouse/walhouse/dedup"
	"github.com/walhouse/walhouse/demo"
)

// runDemo parses the demo's flags and runs it (package demo).
func runDemo(ctx context.Context, inv *cli.Invocation) error {
	fs, ep := cli.NewFlagSet("demo", cli.UsesPG|cli.UsesKafka|cli.UsesClickHouse)
	tenants := fs.Int("tenants", 8, "tenants in the generated workload")
	orders := fs.Int("orders", 2500, "orders inserted per tenant")
	name := fs.String("name", demo.DefaultName, "name of the PostgreSQL database (created on --pg's server), replication slot, publication, topic prefix, ClickHouse database and dedup key prefix the demo owns and resets on every run")
	dedupAddr := fs.String("dedup-addr", "", "Valkey/Redis host:port or redis:// (rediss:// for TLS) URL for Layer 2 eventId dedup; empty or \"off\" disables it")
	var dedupSec cli.DedupSecurity
	dedupSec.Register(fs)
	listen := fs.String("listen", "127.0.0.1:8080", "address of the query API the demo serves, with its status page and example dashboard (a free port instead when it is taken)")
	writeListen := fs.String("write-listen", "127.0.0.1:8090", "address of the demo's Layer 1 write API, where the example dashboard writes orders (a free port instead when it is taken)")
	keep := fs.Bool("keep", false, "after the demo, keep the pipeline, the query API and the write API running until Ctrl-C (make demo KEEP=1)")
	if err := inv.Parse(fs); err != nil {
		return err
	}
	if *tenants < 1 || *orders < 1 {
		return cli.Usagef("--tenants %d, --orders %d: want positive numbers", *tenants, *orders)
	}
	if !demo.ValidName(*name) {
		return cli.Usagef("--name %q: want a lower-case letter, then up to 47 lower-case letters, digits or _", *name)
	}
	c := demo.Config{Name: *name, Tenants: *tenants, Orders: *orders, Listen: *listen, WriteListen: *writeListen, Keep: *keep, Out: os.Stdout}
	var err error
	if c.PG, err = ep.PGURL(); err != nil {
		return err
	}
	if c.ClickHouse, err = clickHouse(ep); err != nil {
		return err
	}
	if c.Kafka, err = ep.KafkaConfig(); err != nil {
		return err
	}
	if *dedupAddr != "" && *dedupAddr != "off" {
		cfg := dedup.Config{Addr: *dedupAddr}
		if err := dedupSec.Apply(&cfg); err != nil {
			return err
		}
		c.Dedup = &cfg
	}
	return demo.Run(ctx, c)
}
