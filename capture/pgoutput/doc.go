// Package pgoutput decodes the messages of PostgreSQL's pgoutput logical
// decoding plugin (protocol version 1) that capture reads on its hot path:
// row changes (Insert, Update, Delete, as RowChange, with their TupleData
// as TupleColumn), Truncate (TruncateMessage) and logical messages
// (LogicalMessage, written by pg_logical_emit_message). Its message types
// and constants are named as jackc/pglogrepl names them; Begin, Commit and
// Relation messages are decoded by pglogrepl itself.
//
// It is stateless and a leaf: bytes of one message enter, a decoded value
// leaves, with no relation cache, database, Kafka or clock. Decoders never
// panic on malformed input (their fuzz targets check it), return ErrShort
// for a message that ends early, and alias the message buffer where they
// say so: such values are valid only until the next message is received.
// Package capture turns the decoded messages into records.
package pgoutput
