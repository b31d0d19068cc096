package sink

import (
	"fmt"
	"strings"
	"time"

	"github.com/walhouse/walhouse/record"
)

// Everything the sink reads from Kafka is untrusted: anyone who may write to
// a table topic could otherwise load rows into another table, move a
// table's lastSyncAt into the future or truncate a table it does not own.
// Capture names each table's topic deterministically (record.TopicName), so
// the sink checks that every record, heartbeat and truncate marker speaks of
// the table its topic belongs to; what does not goes to the dead letters
// with the reason. (The record decoder checks the rest: identity, version
// against the change's WAL position, tenant against the tenant column, and
// its memory budget; future.go bounds positions and times.)

// topicSource returns the source table of a heartbeat or truncate marker
// whose table header is qualified ("schema.table") as read from topic. The
// header does not quote its parts, so a schema or table with a dot in its
// name is ambiguous: the split whose topic is this topic is the one capture
// wrote. Without a topic prefix (a sink built without one) nothing is
// checked.
func (s *Sink) topicSource(topic string, src record.Source) (record.Source, error) {
	if s.cfg.TopicPrefix == "" {
		return src, nil
	}
	qualified := src.Schema + "." + src.Table
	for i := strings.IndexByte(qualified, '.'); i >= 0; {
		c := record.Source{Schema: qualified[:i], Table: qualified[i+1:]}
		if c.Schema != "" && c.Table != "" && record.TopicName(s.cfg.TopicPrefix, c.Schema, c.Table) == topic {
			return c, nil
		}
		j := strings.IndexByte(qualified[i+1:], '.')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return src, fmt.Errorf("%w: it names table %s, whose topic is %s, not %s", record.ErrInvalid, qualified,
		record.TopicName(s.cfg.TopicPrefix, src.Schema, src.Table), topic)
}

// checkTopic reports a decoded record whose table is not its topic's.
func (s *Sink) checkTopic(topic string, src record.Source) error {
	if s.cfg.TopicPrefix == "" {
		return nil
	}
	if want := record.TopicName(s.cfg.TopicPrefix, src.Schema, src.Table); want != topic {
		return fmt.Errorf("%w: a record of table %s.%s arrived on topic %s, but that table's topic is %s", record.ErrInvalid, src.Schema, src.Table, topic, want)
	}
	return nil
}

// maxClockSkew is how far in the sink's future a heartbeat may claim to
// be before it is refused (checkTime), and the latest time a record's or
// truncate marker's position is bounded for (sink/future.go).
const maxClockSkew = 5 * time.Minute

// checkHeartbeat reports a heartbeat that is not well-formed for its topic.
func (s *Sink) checkHeartbeat(topic string, h *record.Heartbeat) error {
	src, err := s.topicSource(topic, h.Source)
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	h.Source = src
	return nil // its time and position: checkPosition
}

// checkTruncate reports a truncate marker that is not well-formed for its
// topic.
func (s *Sink) checkTruncate(topic string, tr *record.Truncate) error {
	src, err := s.topicSource(topic, tr.Source)
	if err != nil {
		return fmt.Errorf("truncate marker: %w", err)
	}
	tr.Source = src
	return nil
}
