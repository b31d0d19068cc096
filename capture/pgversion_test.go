package capture

import (
	"context"
	"encoding/binary"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/record"
)

func TestServerVersion(t *testing.T) {
	for _, c := range []struct {
		num      int
		name     string
		refused  bool
		tested   bool
		messages bool
		filters  bool
		args     []string
	}{
		{120018, "12.18", true, true, false, false, nil},
		{130023, "13.23", false, true, false, false, []string{"proto_version '1'", "publication_names 'p''x'"}},
		{140023, "14.23", false, true, true, false, []string{"proto_version '1'", "publication_names 'p''x'", "messages 'true'"}},
		{150018, "15.18", false, true, true, true, []string{"proto_version '1'", "publication_names 'p''x'", "messages 'true'"}},
		{160014, "16.14", false, true, true, true, []string{"proto_version '1'", "publication_names 'p''x'", "messages 'true'"}},
		{170010, "17.10", false, true, true, true, []string{"proto_version '1'", "publication_names 'p''x'", "messages 'true'"}},
		{180004, "18.4", false, true, true, true, []string{"proto_version '1'", "publication_names 'p''x'", "messages 'true'"}},
		{190000, "19.0", false, false, true, true, []string{"proto_version '1'", "publication_names 'p''x'", "messages 'true'"}},
	} {
		v := serverVersion(c.num)
		if v.String() != c.name {
			t.Errorf("%d: String() = %q, want %q", c.num, v, c.name)
		}
		if err := v.check(); (err != nil) != c.refused || (err != nil && !strings.Contains(err.Error(), "PostgreSQL 13 or newer")) {
			t.Errorf("%s: check() = %v, want refused %v", v, err, c.refused)
		}
		if c.refused {
			continue
		}
		if v.tested() != c.tested || v.logicalMessages() != c.messages || v.publicationFilters() != c.filters || v.publishesGenerated() != (c.num >= 180000) {
			t.Errorf("%s: tested %v, logical messages %v, publication filters %v; want %v, %v, %v",
				v, v.tested(), v.logicalMessages(), v.publicationFilters(), c.tested, c.messages, c.filters)
		}
		if got := v.pluginArgs("p'x"); !reflect.DeepEqual(got, c.args) {
			t.Errorf("%s: pluginArgs = %q, want %q", v, got, c.args)
		}
	}
}

// keepalive encodes a primary keepalive message ('k') at walEnd.
func keepalive(walEnd record.LSN) []byte {
	b := binary.BigEndian.AppendUint64([]byte{'k'}, uint64(walEnd))
	b = binary.BigEndian.AppendUint64(b, 0)
	return append(b, 0)
}

// xlogData encodes an XLogData message ('w') carrying msg, sent at start.
func xlogData(start record.LSN, msg []byte) []byte {
	b := binary.BigEndian.AppendUint64([]byte{'w'}, uint64(start))
	b = binary.BigEndian.AppendUint64(b, uint64(start))
	b = binary.BigEndian.AppendUint64(b, 0)
	return append(b, msg...)
}

// commitMsg encodes a pgoutput Commit message ending at end.
func commitMsg(end record.LSN) []byte {
	b := binary.BigEndian.AppendUint64([]byte{'C', 0}, uint64(end)-8)
	b = binary.BigEndian.AppendUint64(b, uint64(end))
	return binary.BigEndian.AppendUint64(b, 0)
}

// A walBeat (PostgreSQL 13) is sent once the stream has passed its
// position outside a transaction, by a keepalive or by a commit, and
// never while a transaction is open.
func TestWalBeatWaitsForTheStream(t *testing.T) {
	ctx := context.Background()
	prod := &heldProducer{}
	cfg := defaults()
	cfg.partitions = 2
	cfg.topicPrefix = "wh"
	s := &stream{
		c:          &Capturer{cfg: cfg, producer: prod, log: slog.New(slog.DiscardHandler)},
		parts:      map[string]int32{},
		acks:       newAckTracker(100),
		produceCtx: ctx,
		tables:     []string{"public.t"},
		version:    130023,
	}
	s.tr = newTranslator(&s.c.cfg, "", nil, s, s, nil, nil)
	at := time.Date(2026, 11, 24, 5, 0, 0, 0, time.UTC)
	beats := func() []string {
		var got []string
		for _, kr := range prod.records {
			for _, h := range kr.Headers {
				if h.Key == record.HeaderLSN {
					got = append(got, kr.Topic+"/"+string(h.Value))
				}
			}
		}
		return got
	}
	step := func(name string, data []byte, want ...string) {
		t.Helper()
		if err := s.handleCopyData(ctx, data); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := beats(); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: heartbeats %q, want %q", name, got, want)
		}
	}

	s.walBeat = &walBeat{at: at, lsn: 500}
	step("keepalive before the beat's position", keepalive(499))
	s.tr.inTx, s.tx = true, s.acks.begin()
	step("keepalive past it inside a transaction", keepalive(600))
	step("the transaction's commit", xlogData(700, commitMsg(700)), "wh.public.t/0/1F4", "wh.public.t/0/1F4")
	if s.walBeat != nil {
		t.Fatal("the beat is still pending after it was sent")
	}
	for _, kr := range prod.records[:2] {
		hb, ok, err := record.ParseHeartbeat(headerLookup(kr))
		if !ok || err != nil || !hb.At.Equal(at.Add(-heartbeatMargin)) {
			t.Errorf("heartbeat %+v (%v, %v), want one at %s", hb, ok, err, at.Add(-heartbeatMargin))
		}
	}

	s.walBeat = &walBeat{at: at, lsn: 800}
	step("keepalive at the next beat's position", keepalive(800), "wh.public.t/0/1F4", "wh.public.t/0/1F4", "wh.public.t/0/320", "wh.public.t/0/320")
	step("keepalive with nothing pending", keepalive(900), "wh.public.t/0/1F4", "wh.public.t/0/1F4", "wh.public.t/0/320", "wh.public.t/0/320")
}
