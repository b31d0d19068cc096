package capture

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/capture/pgoutput"
)

// standInOf returns the pgoutput stand-in of msg as boundedReader makes it.
func standInOf(msg []byte) []byte {
	out := binary.BigEndian.AppendUint32([]byte{msgOversized}, uint32(len(msg)))
	return append(out, msg[:min(len(msg), oversizedKeep)]...)
}

// TestTranslatorOversized: the stand-in of a logical message over the
// bound is skipped and counted, the stand-in of a row change becomes a
// too_large dead letter of its table (without a key: it was not read), and
// the changes around them go on.
func TestTranslatorOversized(t *testing.T) {
	tr, col, ignored := newTestTranslator(t)
	ctx := context.Background()
	big := bytes.Repeat([]byte{1}, 200)
	for _, s := range []step{describe(ordersRel), begin(0x100), insert(0x10, relOrders, txt("acme"), txt("1"), txt("a"))} {
		if err := feed(ctx, tr, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.handle(ctx, 0x20, standInOf(insertMsg(relOrders, big))); err != nil {
		t.Fatal(err)
	}
	if err := tr.handle(ctx, 0x30, standInOf(logicalMsg("anyone", big))); err != nil {
		t.Fatal(err)
	}
	for _, s := range []step{insert(0x40, relOrders, txt("acme"), txt("2"), txt("b")), commit(0x100, 0x108)} {
		if err := feed(ctx, tr, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.handle(ctx, 0x200, standInOf(logicalMsg(heartbeatPrefix, big))); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"topic wh.public.orders", "begin",
		`insert public.orders lsn 0/10 #0 tenant "acme" ('acme', '1', 'a')`,
		`dead letter public.orders too_large commit 0/100 key `,
		`insert public.orders lsn 0/40 #2 tenant "acme" ('acme', '2', 'b')`,
		"commit 0/108 at 05:06:07",
	}
	if !slices.Equal(col.log, want) {
		t.Errorf("got\n\t%s\nwant\n\t%s", strings.Join(col.log, "\n\t"), strings.Join(want, "\n\t"))
	}
	if n := total(t, ignored.oversized.counter); n != 3 {
		t.Errorf("%v oversized messages counted, want 3", n)
	}
	if n := total(t, ignored.counter); n != 0 {
		t.Errorf("%v walhouse messages counted as forged, want 0", n)
	}
	// A kind PostgreSQL never sends that large stops capture.
	if err := tr.handle(ctx, 0x300, standInOf(append([]byte{pgoutput.MessageTypeRelation}, big...))); err == nil || !strings.Contains(err.Error(), "--max-record-bytes") {
		t.Errorf("an oversized Relation message: %v, want an error naming --max-record-bytes", err)
	}
}

// TestTranslatorFillTooLarge: an update of a table being copied whose
// unchanged TOAST values, read from the source, are over the read bound is
// a too_large dead letter with its key, and the stream goes on.
func TestTranslatorFillTooLarge(t *testing.T) {
	tr, col, _ := newTestTranslator(t)
	col.copying = map[string]bool{"public.orders": true}
	col.fillErr = fmt.Errorf("%w: over the read bound", ErrRowTooLarge)
	ctx := context.Background()
	for _, s := range []step{
		describe(ordersRel), begin(0x100),
		update(0x10, relOrders, 0, nil, txt("acme"), txt("1"), toast),
		insert(0x20, relOrders, txt("acme"), txt("2"), txt("b")),
		commit(0x100, 0x108),
	} {
		if err := feed(ctx, tr, s); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"topic wh.public.orders", "begin", "read from source: an update",
		`dead letter public.orders too_large commit 0/100 key {"id":"1","tenant_id":"acme"}`,
		`insert public.orders lsn 0/20 #1 tenant "acme" ('acme', '2', 'b')`,
		"commit 0/108 at 05:06:07",
	}
	if !slices.Equal(col.log, want) {
		t.Errorf("got\n\t%s\nwant\n\t%s", strings.Join(col.log, "\n\t"), strings.Join(want, "\n\t"))
	}
}
