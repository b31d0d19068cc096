package record

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxTopicLen is Kafka's limit on topic names.
const maxTopicLen = 249

// topicHashDigits is the length of the hash that ends a sanitized topic
// name.
const topicHashDigits = 10

// TopicName returns the Kafka topic of a table: "<prefix>.<schema>.<table>".
// Kafka allows only ASCII letters, digits, '.', '_' and '-' in topic names,
// up to 249 characters, while PostgreSQL identifiers may hold anything
// (spaces, quotes, non-ASCII letters). A name that does not fit has every
// other character replaced by '_' and gets a hash of the exact schema and
// table ("-" and 10 hex digits), so that "a b" and "a_b" never share a
// topic. No two tables share a topic: a plain name splits at its first two
// dots after the prefix (so a schema with a dot is hashed too), and a
// table whose plain name would end like a hashed one is hashed as well, so
// plain and hashed names never meet; two hashed names meet only if 40 bits
// of SHA-256 of two tables do, which capture refuses at start (see
// checkNames).
func TopicName(prefix, schema, table string) string {
	name := prefix + "." + schema + "." + table
	if len(name) <= maxTopicLen && !strings.ContainsFunc(name, illegalTopicRune) && !strings.Contains(schema, ".") && !hashedTopicLike(name) {
		return name
	}
	sum := sha256.Sum256([]byte(schema + "\x00" + table))
	suffix := "-" + hex.EncodeToString(sum[:])[:topicHashDigits]
	clean := strings.Map(func(r rune) rune {
		if illegalTopicRune(r) {
			return '_'
		}
		return r
	}, name)
	return clean[:min(len(clean), maxTopicLen-len(suffix))] + suffix
}

// hashedTopicLike reports whether name ends like a hashed topic name.
func hashedTopicLike(name string) bool {
	i := len(name) - topicHashDigits - 1
	if i < 0 || name[i] != '-' {
		return false
	}
	return !strings.ContainsFunc(name[i+1:], func(r rune) bool { return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') })
}

func illegalTopicRune(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
}
