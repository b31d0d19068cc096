package pgoutput

import (
	"reflect"
	"testing"

	"github.com/walhouse/walhouse/capture/pgoutput/pgoutputtest"
)

func TestDecodeTruncate(t *testing.T) {
	tests := []struct {
		name    string
		msg     []byte
		want    TruncateMessage
		wantErr bool
	}{
		{name: "one table", msg: truncateMsg(0, 16384), want: TruncateMessage{Relations: []uint32{16384}}},
		{name: "cascade, restart identity", msg: truncateMsg(3, 1, 2), want: TruncateMessage{Cascade: true, RestartIdentity: true, Relations: []uint32{1, 2}}},
		{name: "restart identity", msg: truncateMsg(2, 7), want: TruncateMessage{RestartIdentity: true, Relations: []uint32{7}}},
		{name: "relation id cut short", msg: truncateMsg(0, 1, 2)[:12], wantErr: true},
		{name: "trailing bytes", msg: append(truncateMsg(0, 1), 0), wantErr: true},
		{name: "count larger than the message", msg: []byte{'T', 0xff, 0xff, 0xff, 0xff, 0}, wantErr: true},
		{name: "unknown option", msg: truncateMsg(4, 1), wantErr: true},
		{name: "header only", msg: []byte{'T', 0, 0}, wantErr: true},
		{name: "not a truncate", msg: append([]byte{'I'}, truncateMsg(0, 1)[1:]...), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeTruncate(tt.msg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func FuzzDecodeTruncate(f *testing.F) {
	f.Add(truncateMsg(0, 16384))
	f.Add(truncateMsg(3, 1, 2, 3))
	f.Add([]byte{'T', 0xff, 0xff, 0xff, 0xff, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeTruncate(b)
		if err != nil {
			return
		}
		var opts byte
		if m.Cascade {
			opts |= TruncateCascade
		}
		if m.RestartIdentity {
			opts |= TruncateRestartIdentity
		}
		if again := truncateMsg(opts, m.Relations...); string(again) != string(b) {
			t.Errorf("decoded %+v from %x, which encodes as %x", m, b, again)
		}
	})
}

// truncateMsg encodes a pgoutput Truncate message of protocol version 1.
var truncateMsg = pgoutputtest.Truncate
