package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func FuzzZZTime(f *testing.F) {
	for _, s := range []string{`"2024-02-29T00:00:00Z"`, `"2023-02-29T00:00:00Z"`, `"2024-04-31T00:00:00Z"`, `"2024-13-01T00:00:00Z"`, `"2024-01-01T24:00:00Z"`, `"2024-01-01T23:59:60Z"`, `"2024-01-01T23:59:59.1234567891Z"`, `"2024-01-01t23:59:59z"`, `"0000-02-29T00:00:00Z"`, `"2024-01-01T00:00:00.Z"`, `"2024-01-01T00:00:00+00:00"`, `null`, `"\u0032024-01-01T00:00:00Z"`, `"2024-01-01T00:00:00,5Z"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &scanner{data: data}
		var buf []byte
		got, err1 := s.readTime("x", &buf)
		if err1 == nil && s.pos != len(data) {
			return // trailing data; reference would see syntax error as a whole
		}
		var want time.Time
		err2 := json.Unmarshal(data, &want)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("%q: new %v ref %v", data, err1, err2)
		}
		if err1 == nil && (!got.Equal(want) || got.Location().String() != want.Location().String() || got.String() != want.String() || (got.Location()==time.UTC) != (want.Location()==time.UTC)) {
			t.Fatalf("%q: new %v ref %v", data, got, want)
		}
		if err1 != nil && !errors.Is(err1, ErrInvalid) {
			t.Fatal(err1)
		}
	})
}

func FuzzZZInt(f *testing.F) {
	for _, s := range []string{"0", "-0", "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809", "1e2", "1.0", "01", "+1", "-", "32767", "-32768", "32768", "4294967295", "4294967296", "18446744073709551615", "18446744073709551616", "9999999999999999999", "-9999999999999999999", "null", " 5", "-00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, bits := range []int{16, 32, 64} {
			s := &scanner{data: data}
			got, err1 := s.readInt(bits, "x")
			if err1 == nil && s.pos != len(data) {
				continue
			}
			var err2 error
			var want int64
			switch bits {
			case 16:
				var v int16
				err2 = json.Unmarshal(data, &v)
				want = int64(v)
			case 32:
				var v int32
				err2 = json.Unmarshal(data, &v)
				want = int64(v)
			case 64:
				var v int
				err2 = json.Unmarshal(data, &v)
				want = int64(v)
			}
			if (err1 == nil) != (err2 == nil) || err1 == nil && got != want {
				t.Fatalf("int%d %q: new %v %v ref %v %v", bits, data, got, err1, want, err2)
			}
		}
		for _, bits := range []int{32, 64} {
			s := &scanner{data: data}
			got, err1 := s.readUint(bits, "x")
			if err1 == nil && s.pos != len(data) {
				continue
			}
			var err2 error
			var want uint64
			if bits == 32 {
				var v uint32
				err2 = json.Unmarshal(data, &v)
				want = uint64(v)
			} else {
				err2 = json.Unmarshal(data, &want)
			}
			if (err1 == nil) != (err2 == nil) || err1 == nil && got != want {
				t.Fatalf("uint%d %q: new %v %v ref %v %v", bits, data, got, err1, want, err2)
			}
		}
	})
}

func FuzzZZString(f *testing.F) {
	for _, s := range []string{`"a"`, `"\ud800"`, `"\ud800\udc00"`, `"\udc00\ud800"`, `"\ud800\u0041"`, "\"\xff\"", "\"\xc3\"", `"\u00e9"`, `"a\"`, `"\x"`, `"\u12"`, "\"\x1f\"", "\"\x7f\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &scanner{data: data}
		got, null, ok := s.appendString([]byte("pre"))
		if ok && (s.pos != len(data) || null) {
			return
		}
		var want string
		err := json.Unmarshal(data, &want)
		if ok != (err == nil) || ok && string(got) != "pre"+want {
			t.Fatalf("%q: new %q %v ref %q %v", data, got, ok, want, err)
		}
		// readChecked and name too
		s = &scanner{data: data}
		var buf []byte
		c, err1 := s.readChecked(&buf, "x")
		if (err1 == nil) != ok || ok && string(c) != want {
			t.Fatalf("readChecked %q: %q %v", data, c, err1)
		}
		s = &scanner{data: append(bytes.Clone(data), ':')}
		n, err1 := s.name(&buf, "x")
		if (err1 == nil) != ok || ok && string(n) != want {
			t.Fatalf("name %q: %q %v", data, n, err1)
		}
		s = &scanner{data: append(bytes.Clone(data), ':')}
		n, err1 = s.appendName([]byte("pre"), "x")
		if (err1 == nil) != ok || ok && string(n) != "pre"+want {
			t.Fatalf("appendName %q: %q %v", data, n, err1)
		}
	})
}

type zzNames struct {
	EventID string `json:"eventId"`
	Key     string `json:"key"`
	Schema  string `json:"schemaId"`
	Typmod  string `json:"typmod"`
	Missing string `json:"missing"`
}

func FuzzZZName(f *testing.F) {
	for _, s := range []string{"eventId", "EVENTID", "\u212aey", "\u017fchemaId", "ſchemaıd", "typmoD", "missinG", "\u212a\u212a"} {
		f.Add(s)
	}
	names := []string{"eventId", "key", "schemaId", "typmod", "missing"}
	f.Fuzz(func(t *testing.T, key string) {
		data, _ := json.Marshal(map[string]string{key: "v"})
		var z zzNames
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		err := dec.Decode(&z)
		// unquoted key
		var m map[string]string
		json.Unmarshal(data, &m)
		var k string
		for kk := range m {
			k = kk
		}
		i := fieldIndex(names, []byte(k), 0)
		refHit := err == nil
		if (i >= 0) != refHit {
			t.Fatalf("%q: new %d ref %v", key, i, err)
		}
		if refHit {
			var vals = []string{z.EventID, z.Key, z.Schema, z.Typmod, z.Missing}
			if vals[i] != "v" {
				t.Fatalf("%q: new picks %s", key, names[i])
			}
		}
	})
}
