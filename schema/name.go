package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"

	"github.com/walhouse/walhouse/record"
)

// ReservedPrefix starts the name of every table walhouse keeps for itself
// in the ClickHouse database (the load watermarks, SyncTable; verify's
// rounds, VerifyTable); the query API hides such tables. TableName never gives a source table a
// name that starts with it.
const ReservedPrefix = "_walhouse"

// MaxNameBytes bounds a table name as ClickHouse stores it on disk: every
// byte other than an ASCII letter, digit or '_' takes three ("%C3"), and
// ClickHouse refuses a name whose escaped form is longer than 213 bytes
// minus the escaped database name, 205 for the default database walhouse.
const MaxNameBytes = 205

// hashMark introduces the hash that ends a hashed name:
// "<readable>__wh<16 hex digits>".
const hashMark = "__wh"

const hashDigits = 16

// TableName returns the ClickHouse table name of a source table. Ordinary
// names keep the rule walhouse always had: the table's name in schema
// public, "<schema>__<table>" elsewhere (orders, billing__invoices). Every
// other source table gets a hashed name: a readable part, then "__wh" and
// 16 hex digits of the SHA-256 of the exact schema and table
// (a__b__wh1f0c…). No two source tables share a name, because:
//
//   - An ordinary name decodes to exactly one source table. A name without
//     "__" is a table of public; one with "__" splits at its first "__",
//     which is the separator, because an ordinary name's schema contains no
//     "__" and does not end with '_' (so public."a__b", b.c__d, "b_"."_c"
//     and a__b.c are not ordinary: they would read as a.b, b.c__d, b.__c and
//     a.b__c).
//   - A hashed name always ends with "__wh" and 16 lowercase hex digits, and
//     an ordinary name never does (a source table whose ordinary name would
//     end like that is hashed too), so the two kinds never meet.
//   - Two hashed names are equal only if 64 bits of SHA-256 of two different
//     tables are: capture refuses such a pair at start (see capture), and
//     the sink checks which source table a ClickHouse table belongs to
//     before it loads into it (SourceComment).
//
// A name is also hashed when it starts with ReservedPrefix (walhouse's own
// tables), holds control characters (tab, newline) or invalid UTF-8, or is
// longer than ClickHouse allows (MaxNameBytes); the readable part then
// replaces control characters by '_', drops the reserved prefix's leading
// '_' and is cut to fit.
func TableName(src record.Source) string {
	name := LegacyTableName(src)
	if ordinary(src, name) {
		return name
	}
	readable := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '_'
		}
		return r
	}, strings.ToValidUTF8(name, "_"))
	if strings.HasPrefix(readable, ReservedPrefix) {
		readable = readable[1:]
	}
	sum := sha256.Sum256([]byte(src.Schema + "\x00" + src.Table))
	suffix := hashMark + hex.EncodeToString(sum[:])[:hashDigits]
	for escapedLen(readable)+len(suffix) > MaxNameBytes {
		_, size := utf8.DecodeLastRuneInString(readable)
		readable = readable[:len(readable)-size]
	}
	return readable + suffix
}

// LegacyTableName returns the name walhouse gave every source table before
// names were made collision-free: the table in public, "<schema>__<table>"
// elsewhere. TableName keeps it for ordinary names; the sink uses it to
// find a table an older walhouse created under another name.
func LegacyTableName(src record.Source) string {
	if src.Schema == "public" {
		return src.Table
	}
	return src.Schema + "__" + src.Table
}

// ordinary reports whether name, the legacy name of src, stays src's name:
// it decodes to src alone and cannot be mistaken for a hashed name or one
// of walhouse's own tables.
func ordinary(src record.Source, name string) bool {
	if src.Schema == "public" {
		if strings.Contains(src.Table, "__") {
			return false
		}
	} else if src.Schema == "" || strings.Contains(src.Schema, "__") || strings.HasSuffix(src.Schema, "_") {
		return false
	}
	return src.Table != "" &&
		!strings.HasPrefix(name, ReservedPrefix) &&
		!hashedLike(name) &&
		utf8.ValidString(name) &&
		!strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) &&
		escapedLen(name) <= MaxNameBytes
}

// hashedLike reports whether name ends like a hashed name.
func hashedLike(name string) bool {
	i := len(name) - hashDigits - len(hashMark)
	if i < 0 || name[i:i+len(hashMark)] != hashMark {
		return false
	}
	for _, c := range []byte(name[i+len(hashMark):]) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// escapedLen is the length of name as ClickHouse escapes it for a file
// name: ASCII letters, digits and '_' as they are, other bytes as "%XX".
func escapedLen(name string) int {
	n := 0
	for _, c := range []byte(name) {
		if plainByte(c) {
			n++
		} else {
			n += 3
		}
	}
	return n
}

// plainByte reports whether ClickHouse keeps c as it is in a file name.
func plainByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

// sourceCommentPrefix starts the comment of every table walhouse creates
// for a source table.
const sourceCommentPrefix = "walhouse:source="

// SourceComment returns the comment of the ClickHouse table that holds
// src's rows: `walhouse:source="schema"."table"`, the exact source names
// quoted as PostgreSQL quotes identifiers. The sink writes it when it
// creates the table and checks it before it first loads into a table, so
// rows of two source tables never share one even if their names did (a
// table made by hand, a hash collision, a rule of an older walhouse).
func SourceComment(src record.Source) string {
	return sourceCommentPrefix + quotePG(src.Schema) + "." + quotePG(src.Table)
}

// CommentOwner returns the source table named by a comment written by
// SourceComment, in its quoted form; ok is false for other comments
// (tables created before walhouse wrote them, or not by walhouse).
func CommentOwner(comment string) (owner string, ok bool) {
	return strings.CutPrefix(comment, sourceCommentPrefix)
}

func quotePG(ident string) string {
	return `"` + strings.ReplaceAll(ident, `"`, `""`) + `"`
}
