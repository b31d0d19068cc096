package capture

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

func TestMessageKey(t *testing.T) {
	key := messageKey(bytes.Repeat([]byte{7}, messageKeyLen))
	other := messageKey(bytes.Repeat([]byte{8}, messageKeyLen))
	at := time.Date(2026, 11, 24, 1, 2, 3, 456789000, time.UTC)
	good := key.heartbeatContent(at)
	tamper := func(b []byte, i int) []byte {
		c := bytes.Clone(b)
		c[i] ^= 1
		return c
	}
	tests := []struct {
		name string
		msg  []byte
		want error // nil: at
	}{
		{"signed", good, nil},
		{"unsigned, as before walhouse signed them", []byte("1795488123456789"), errUnauthenticated},
		{"other key", other.heartbeatContent(at), errUnauthenticated},
		{"content changed", tamper(good, len(good)-1), errUnauthenticated},
		{"mac changed", tamper(good, 0), errUnauthenticated},
		{"mac only", good[:macLen], errUnauthenticated},
		{"no separator", append(bytes.Clone(good[:macLen]), good[macLen+1:]...), errUnauthenticated},
		{"empty", nil, errUnauthenticated},
		{"signed garbage", key.sign([]byte("soon")), errMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := key.heartbeatTime(tc.msg)
			if tc.want == nil {
				if err != nil || !got.Equal(at) {
					t.Fatalf("heartbeatTime = %v, %v; want %v", got, err, at)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("heartbeatTime error = %v, want %v", err, tc.want)
			}
		})
	}
	if _, ok := messageKey(nil).verify(good); ok {
		t.Fatal("an empty key verified a message")
	}
}
