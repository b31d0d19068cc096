package record

// Headers of a record in the dead-letter topic (`<prefix>-dlq`). Capture and
// the sink both write there: the sink the Kafka records it can never load
// (their key and value unchanged, so a replay produces exactly what failed),
// capture the changes that cannot become a record at all (a row without a
// tenant, one over the size bound). Every dead letter has HeaderDLTopic,
// HeaderDLError, HeaderDLFirstSeen and HeaderDLAttempts; the others are set
// where they apply.
const (
	// HeaderDLTopic is the table topic the record was read from or, for
	// capture's dead letters, would have gone to; replays go there.
	HeaderDLTopic = "walhouse-original-topic"
	// HeaderDLPartition and HeaderDLOffset locate the original Kafka
	// record; both are -1 for capture's dead letters, which never were one.
	HeaderDLPartition = "walhouse-original-partition"
	HeaderDLOffset    = "walhouse-original-offset"
	// HeaderDLError is the reason in words, with what to do.
	HeaderDLError     = "walhouse-error"
	HeaderDLFirstSeen = "walhouse-first-seen" // RFC 3339
	HeaderDLAttempts  = "walhouse-attempts"
	// HeaderDLOrigin says who set the record aside: "capture" or "sink"
	// (absent on dead letters of walhouse versions before it: the sink).
	HeaderDLOrigin = "walhouse-origin"
	// HeaderDLReason is a short, stable reason code (see the Reason*
	// constants), the label of the dead-letter metrics.
	HeaderDLReason = "walhouse-reason"
	// HeaderDLCommitLSN is the commit LSN of the change's transaction.
	HeaderDLCommitLSN = "walhouse-commit-lsn"
	// HeaderDLTable is the source table, "schema.table".
	HeaderDLTable = "walhouse-table"
	// HeaderDLPrimaryKey is the row's primary key as a JSON object of
	// column name to text value (null for a missing value).
	HeaderDLPrimaryKey = "walhouse-primary-key"
)

// Reason codes of capture's dead letters.
const (
	// ReasonNoTenant: the tenant column is NULL, so the row belongs to no
	// tenant walhouse could serve it to.
	ReasonNoTenant = "no_tenant"
	// ReasonInvalid: the change does not form a valid record.
	ReasonInvalid = "invalid_record"
	// ReasonTooLarge: the encoded record exceeds the configured bound.
	ReasonTooLarge = "too_large"
)
