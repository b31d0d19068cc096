package capture

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
// schema and table, so that "a b" and "a_b" never share a topic.
func TopicName(prefix, schema, table string) string {
	name := prefix + "." + schema + "." + table
	if len(name) <= maxTopicLen && !strings.ContainsFunc(name, illegalTopicRune) {
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

// topicOf returns the topic of a "schema.table" name.
func (c *config) topicOf(table string) string {
	schema, name, _ := strings.Cut(table, ".")
	return TopicName(c.topicPrefix, schema, name)
}
