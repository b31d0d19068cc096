package pgoutput

import (
	"testing"

	"github.com/walhouse/walhouse/capture/pgoutput/pgoutputtest"
)

func TestDecodeRowChange(t *testing.T) {
	unchanged := s("\x00u")
	tests := []struct {
		name    string
		msg     []byte
		wantErr bool
		check   func(t *testing.T, c *RowChange)
	}{
		{
			name: "insert",
			msg:  msg('I', 42, []byte{'N'}, tuple(s("acme"), s("1"), nil)),
			check: func(t *testing.T, c *RowChange) {
				if c.RelationID != 42 || len(c.New) != 3 || string(c.New[0].Data) != "acme" || c.New[2].Kind != 'n' || c.OldKind != 0 {
					t.Errorf("got %+v", c)
				}
			},
		},
		{
			name: "update with unchanged toast",
			msg:  msg('U', 7, []byte{'N'}, tuple(s("acme"), unchanged, s(""))),
			check: func(t *testing.T, c *RowChange) {
				if c.New[1].Kind != 'u' || c.New[2].Kind != 't' || len(c.New[2].Data) != 0 {
					t.Errorf("got %+v", c.New)
				}
			},
		},
		{
			name: "update with old key",
			msg:  msg('U', 7, []byte{'K'}, tuple(s("acme"), s("1")), []byte{'N'}, tuple(s("acme"), s("2"))),
			check: func(t *testing.T, c *RowChange) {
				if c.OldKind != 'K' || string(c.Old[1].Data) != "1" || string(c.New[1].Data) != "2" {
					t.Errorf("got %+v", c)
				}
			},
		},
		{
			name: "delete full",
			msg:  msg('D', 9, []byte{'O'}, tuple(s("acme"), s("1"))),
			check: func(t *testing.T, c *RowChange) {
				if c.OldKind != 'O' || len(c.Old) != 2 || len(c.New) != 0 {
					t.Errorf("got %+v", c)
				}
			},
		},
		{name: "empty", msg: nil, wantErr: true},
		{name: "insert without N", msg: msg('I', 1, []byte{'X'}), wantErr: true},
		{name: "length beyond buffer", msg: append(msg('I', 1, []byte{'N'}, []byte{0, 1, 't'}), 0, 0, 0, 9, 'a'), wantErr: true},
		{name: "unknown column kind", msg: msg('I', 1, []byte{'N'}, []byte{0, 1, 'z'}), wantErr: true},
		{name: "trailing bytes", msg: append(msg('I', 1, []byte{'N'}, tuple(s("a"))), 0), wantErr: true},
		{name: "delete without old", msg: msg('D', 1, []byte{'N'}, tuple(s("a"))), wantErr: true},
		{name: "not a row change", msg: msg('B', 1), wantErr: true},
	}
	var c RowChange
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := DecodeRowChange(tc.msg, &c)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if tc.check != nil {
				tc.check(t, &c)
			}
		})
	}
}

func FuzzDecodeRowChange(f *testing.F) {
	f.Add(msg('I', 42, []byte{'N'}, tuple(s("acme"), s("1"), nil)))
	f.Add(msg('U', 7, []byte{'K'}, tuple(s("acme"), s("1")), []byte{'N'}, tuple(s("acme"), s("\x00u"))))
	f.Add(msg('D', 9, []byte{'O'}, tuple(s("x"))))
	var c RowChange
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := DecodeRowChange(data, &c); err != nil {
			return
		}
		// Whatever decodes must stay within the message.
		for _, col := range append(append([]TupleColumn(nil), c.Old...), c.New...) {
			if len(col.Data) > len(data) {
				t.Fatalf("column longer than the message")
			}
		}
	})
}

// The encoders of the messages the tests decode.
var (
	tuple = pgoutputtest.Tuple
	s     = pgoutputtest.Str
	msg   = pgoutputtest.Msg
)
