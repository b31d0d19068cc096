package record

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxTopicLen is Kafka's limit on topic names.
const maxTopicLen = 249

// TopicName returns the Kafka topic of a table: "<prefix>.<schema>.<table>".
// Kafka allows only ASCII letters, digits, '.', '_' and '-' in topic names,
// up to 249 characters, while PostgreSQL identifiers may hold anything
// (spaces, quotes, non-ASCII letters). A name that does not fit has every
// other character replaced by '_' and gets a short hash of the exact
// schema and table, so that "a b" and "a_b" never share a topic. So do
// names that would be ambiguous written plainly: a schema or table with a
// dot ("s"."a.b" and "s.a"."b"), and a table whose name ends like such a
// hash (it could otherwise equal another table's hashed topic).
func TopicName(prefix, schema, table string) string {
	name := prefix + "." + schema + "." + table
	if len(name) <= maxTopicLen && !strings.ContainsFunc(name, illegalTopicRune) &&
		!strings.Contains(schema, ".") && !strings.Contains(table, ".") && !hashLike(table) {
		return name
	}
	sum := sha256.Sum256([]byte(schema + "\x00" + table))
	suffix := "-" + hex.EncodeToString(sum[:5])
	clean := strings.Map(func(r rune) rune {
		if illegalTopicRune(r) {
			return '_'
		}
		return r
	}, name)
	return clean[:min(len(clean), maxTopicLen-len(suffix))] + suffix
}

func illegalTopicRune(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
}

// topicHashLen is the length of the hash suffix of a topic name, "-" and
// ten hex digits.
const topicHashLen = 11

// hashLike reports whether name ends like a topic hash suffix.
func hashLike(name string) bool {
	if len(name) < topicHashLen || name[len(name)-topicHashLen] != '-' {
		return false
	}
	for _, c := range name[len(name)-topicHashLen+1:] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
