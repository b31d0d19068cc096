package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/harness/testenv"
)

// snapshot measures reading the whole table: psql's COPY to /dev/null
// against walhouse's initial snapshot into Kafka.
func (b *bench) snapshot(ctx context.Context) (err error) {
	// Set hint bits and statistics first, so neither reader pays for them.
	if _, err := b.pg.Exec(ctx, "VACUUM (ANALYZE) "+b.quotedTable()); err != nil {
		return fmt.Errorf("vacuum %s: %w", b.names.table, err)
	}
	var rows int64
	if err := b.pg.QueryRow(ctx, "SELECT count(*) FROM "+b.quotedTable()).Scan(&rows); err != nil {
		return fmt.Errorf("count the rows of %s: %w", b.names.table, err)
	}
	ref, err := b.timeCopy(ctx, rows)
	if err != nil {
		return err
	}
	var undo testenv.Cleanups
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		err = errors.Join(err, undo.Run(cctx))
	}()
	wh, err := b.timeSnapshotCapture(ctx, &undo, rows)
	if err != nil {
		return err
	}
	b.result.add(comparison{
		title: fmt.Sprintf("snapshot: whole table, walhouse --snapshot-workers %d", b.opts.workers),
		ref:   ref, walhouse: wh, ratioTarget: 0.7, rssTarget: 165 << 20,
	})
	if b.opts.profileDir == "" {
		return nil
	}
	slot := b.names.slot("psnap")
	b.pushDropSlot(&undo, slot)
	return b.profile(ctx, profileRequest{
		name: "snapshot", rows: rows,
		prefix: b.names.topicPrefix("psnap"),
		opts:   []capture.Option{capture.WithSlot(slot), capture.WithSnapshotWorkers(b.opts.workers)},
		// Streaming, hence a confirmed position, starts once the snapshot is complete.
		done: func(s capture.Stats) bool { return s.Confirmed != 0 },
	})
}

// timeCopy times psql reading the table with COPY ... TO STDOUT into
// /dev/null.
func (b *bench) timeCopy(ctx context.Context, rows int64) (measurement, error) {
	args := []string{"-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", b.opts.pgURL,
		"-c", "COPY (SELECT * FROM " + b.quotedTable() + ") TO STDOUT"}
	return b.timeTool(ctx, "psql COPY TO STDOUT", rows, "psql", args)
}

// snapshotComplete matches capture's log line at the end of the snapshot,
// and the line that says streaming started, whichever comes first.
func snapshotComplete(line string) bool {
	return (strings.Contains(line, "msg=complete") && strings.Contains(line, "phase=snapshot")) ||
		strings.Contains(line, "msg=streaming")
}

// timeSnapshotCapture times `walhouse capture` creating a fresh slot and
// snapshotting the table into Kafka, until it logs the snapshot complete
// (every row acknowledged by Kafka).
func (b *bench) timeSnapshotCapture(ctx context.Context, undo *testenv.Cleanups, rows int64) (measurement, error) {
	slot, prefix := b.names.slot("snap"), b.names.topicPrefix("snap")
	b.pushDropSlot(undo, slot) // capture creates it
	args := []string{
		"capture", "--slot", slot, "--publication", b.names.publication, "--topic-prefix", prefix,
		"--tables", b.names.table, "--snapshot-workers", fmt.Sprint(b.opts.workers),
	}
	cpu := readServiceCPU(b.opts.localDir)
	p, err := testenv.StartProcess(ctx, testenv.ProcessRequest{Name: "walhouse capture (snapshot)", Bin: b.bin, Args: args, Match: snapshotComplete})
	if err != nil {
		return measurement{}, err
	}
	defer p.LogTo(b.opts.verbose)
	defer p.Stop(15 * time.Second)
	m := measurement{name: "walhouse capture", rows: rows}
	select {
	case <-p.Matched():
	case <-p.Done():
		return m, p.Failed()
	case <-ctx.Done():
		return m, fmt.Errorf("waiting for the snapshot: %w; last output:\n%s", ctx.Err(), p.Output())
	}
	m.took = p.MatchedAt().Sub(p.Started())
	m.cpu, m.services = p.CPUSeconds(), readServiceCPU(b.opts.localDir).sub(cpu)
	if m.rss, err = p.PeakRSS(); err != nil {
		return m, err
	}
	m.note = b.kafkaRows(ctx, prefix+"."+b.names.table)
	return m, nil
}
