package schema

import "testing"

func TestIsSourceColumn(t *testing.T) {
	for _, tc := range []struct {
		comment string
		want    bool
	}{
		{"walhouse:attnum=3,lsn=0/16B3748", true},
		{"walhouse:attnum=1,lsn=0/0", true},
		{"walhouse:attnum=3,lsn=0/16B3748,dropped", false}, // a dropped column's leftover
		{"", false}, // a column walhouse added (synthetic tenant)
		{"walhouse:attnum=0", false},
		{"attnum=3", false},
		{"hand-written note", false},
	} {
		if got := IsSourceColumn(tc.comment); got != tc.want {
			t.Errorf("IsSourceColumn(%q) = %v, want %v", tc.comment, got, tc.want)
		}
	}
}
