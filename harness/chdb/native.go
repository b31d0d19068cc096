package chdb

import (
	"encoding/binary"
)

// minRevisionWithCustomSerialization is the protocol revision from which a
// Native block carries a custom-serialization flag per column
// (DBMS_MIN_REVISION_WITH_CUSTOM_SERIALIZATION in ClickHouse).
const minRevisionWithCustomSerialization = 54454

// helloBlock encodes the answer to clickhouse-go's hello query as one
// Native block at revision, the client_protocol_version the client
// announced: clickhouse-go decodes this one block at its own protocol
// revision, and every later one at the revision the block reports, which is
// 0 because the engine writes Native at revision 0.
func helloBlock(revision uint64, displayName, version, timezone string) []byte {
	var b []byte
	if revision > 0 {
		// BlockInfo: field 1 is_overflows=false, field 2 bucket_num=-1, end.
		b = binary.AppendUvarint(b, 1)
		b = append(b, 0)
		b = binary.AppendUvarint(b, 2)
		b = binary.LittleEndian.AppendUint32(b, 0xFFFFFFFF)
		b = binary.AppendUvarint(b, 0)
	}
	b = binary.AppendUvarint(b, 4) // columns
	b = binary.AppendUvarint(b, 1) // rows
	column := func(name, typ string) {
		b = appendString(b, name)
		b = appendString(b, typ)
		if revision >= minRevisionWithCustomSerialization {
			b = append(b, 0)
		}
	}
	column("displayName()", "String")
	b = appendString(b, displayName)
	column("version()", "String")
	b = appendString(b, version)
	column("revision()", "UInt32")
	b = binary.LittleEndian.AppendUint32(b, 0)
	column("timezone()", "String")
	b = appendString(b, timezone)
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
