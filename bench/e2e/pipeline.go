package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/internal/pgslot"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// pipeline is one `walhouse capture` and one `walhouse sink`, with a slot,
// publication, topic prefix, consumer group, ClickHouse database and dedup
// prefix of their own, all named <base>_<role>.
type pipeline struct {
	name    string
	capture *testenv.Process
	sink    *testenv.Process
	prof    *profiler // with -profile: capture's and sink's profile endpoints
}

// pipelineRequest says what a pipeline captures and how it loads.
type pipelineRequest struct {
	role   string   // e.g. "narrow"; part of every name
	tables []string // schema.table, for capture's --tables
	layer2 bool     // Layer 2 (eventId dedup in Redis) on
}

// startPipeline starts capture and sink at the same moment, as a user
// would. The slot and the publication capture creates are dropped at the
// end of the run.
func (b *bench) startPipeline(ctx context.Context, req pipelineRequest) (*pipeline, error) {
	p := &pipeline{name: b.base + "_" + req.role}
	b.undo.Push("drop publication "+p.name, func(ctx context.Context) error {
		_, err := b.pg.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{p.name}.Sanitize())
		return err
	})
	b.undo.Push("drop replication slot "+p.name, func(ctx context.Context) error {
		return pgslot.Drop(ctx, b.pg, p.name)
	})
	captureArgs := []string{
		"capture", "--slot", p.name, "--publication", p.name, "--topic-prefix", p.name,
		"--tables", strings.Join(req.tables, ","),
	}
	sinkArgs := []string{
		"sink", "--group", p.name, "--topic-prefix", p.name, "--database", p.name,
		"--dedup-prefix", p.name + ":",
	}
	if !req.layer2 {
		sinkArgs = append(sinkArgs, "--dedup-addr", "off")
	}
	if b.o.profile {
		p.prof = &profiler{addrs: map[string]string{}}
		if b.o.out != "" {
			p.prof.dir = filepath.Join(b.o.out, b.o.name+"-profiles")
		}
		for _, proc := range []struct {
			name string
			args *[]string
		}{{"capture", &captureArgs}, {"sink", &sinkArgs}} {
			addr, err := freeAddr()
			if err != nil {
				return nil, err
			}
			p.prof.addrs[proc.name] = addr
			*proc.args = append(*proc.args, "--metrics-addr", addr)
		}
	}
	captureArgs = append(captureArgs, b.o.captureArgs...)
	sinkArgs = append(sinkArgs, b.o.sinkArgs...)
	var err error
	if p.capture, err = testenv.StartProcess(ctx, testenv.ProcessRequest{Name: "capture", Bin: b.bin, Args: captureArgs}); err != nil {
		return nil, err
	}
	if p.sink, err = testenv.StartProcess(ctx, testenv.ProcessRequest{Name: "sink", Bin: b.bin, Args: sinkArgs}); err != nil {
		p.stop(b.o.verbose)
		return nil, err
	}
	return p, nil
}

// processes returns capture and sink, for a meter.
func (p *pipeline) processes() []*testenv.Process { return []*testenv.Process{p.capture, p.sink} }

// alive returns an error when capture or the sink has exited.
func (p *pipeline) alive() error {
	for _, proc := range p.processes() {
		if proc == nil {
			continue
		}
		select {
		case <-proc.Done():
			return proc.Failed()
		default:
		}
	}
	return nil
}

// stop stops the sink, then capture.
func (p *pipeline) stop(verbose bool) {
	for _, proc := range []*testenv.Process{p.sink, p.capture} {
		if proc != nil {
			proc.Stop(15 * time.Second)
			proc.LogTo(verbose)
		}
	}
}

// clickhouseTable returns the quoted name of the ClickHouse table the
// pipeline's sink loads table (of schema public) into.
func (p *pipeline) clickhouseTable(table string) string {
	return schema.QuoteIdent(p.name) + "." + schema.QuoteIdent(schema.TableName(record.Source{Schema: "public", Table: table}))
}

// waitFor calls check every interval until it reports true, failing when
// the pipeline stops or limit passes. check's errors (e.g. a table that
// does not exist yet) mean "not yet"; the last one is reported on timeout.
func (b *bench) waitFor(ctx context.Context, p *pipeline, limit, interval time.Duration, check func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	var last error
	for {
		ok, err := check(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if p != nil {
			if err := p.alive(); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("not done within %v: %w", limit, ctx.Err()), last)
		case <-t.C:
		}
	}
}
