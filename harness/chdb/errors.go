package chdb

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
)

// Exception codes of ClickHouse that this package produces itself or that
// callers commonly branch on. The full list is ErrorCodes.cpp in ClickHouse.
const (
	CodeUnsupportedMethod = 1   // UNSUPPORTED_METHOD: a request feature this front does not implement
	CodeUnknownTable      = 60  // UNKNOWN_TABLE
	CodeUnknownDatabase   = 81  // UNKNOWN_DATABASE
	CodeBadArguments      = 36  // BAD_ARGUMENTS: a request this front cannot parse
	CodeSyntaxError       = 62  // SYNTAX_ERROR
	CodeUnknownSetting    = 115 // UNKNOWN_SETTING
	CodeQueryWasCancelled = 394 // QUERY_WAS_CANCELLED
	CodeUnknownException  = 1002
)

// ErrClosed is returned by every call on an Engine after Close.
var ErrClosed = errors.New("chdb: engine is closed")

// ErrAlreadyOpen is returned by Open when this process already opened the
// engine: libchdb keeps one engine per process, bound to one data path.
var ErrAlreadyOpen = errors.New("chdb: the engine is already open in this process (libchdb allows one engine per process; share the *Engine)")

// Error is an exception raised by the ClickHouse engine. Code is the
// ClickHouse exception code ("Code: 60. DB::Exception: ..." gives 60), or
// CodeUnknownException when the message carries none.
type Error struct {
	Code    int
	Message string // the engine's message, verbatim
}

// Error returns the message in ClickHouse's form, "Code: N. DB::Exception: …".
func (e *Error) Error() string {
	if strings.HasPrefix(e.Message, "Code: ") {
		return e.Message
	}
	return "Code: " + strconv.Itoa(e.Code) + ". " + e.Message
}

// exceptionCode finds the "Code: NNN." prefix ClickHouse puts on its
// exception text; the engine may prefix the message with context, so it is
// searched for, not anchored.
var exceptionCode = regexp.MustCompile(`Code: (\d+)\.`)

// parseError turns an engine error message into an *Error.
func parseError(msg string) *Error {
	msg = strings.TrimRight(msg, "\r\n ")
	code := CodeUnknownException
	if m := exceptionCode.FindStringSubmatch(msg); m != nil {
		if c, err := strconv.Atoi(m[1]); err == nil && c > 0 {
			code = c
		}
	}
	return &Error{Code: code, Message: msg}
}

// errorf builds an *Error in ClickHouse's message format for conditions this
// package detects itself, so HTTP clients parse them like engine errors.
func errorf(code int, msg string) *Error {
	return &Error{Code: code, Message: "Code: " + strconv.Itoa(code) + ". DB::Exception: " + msg}
}
