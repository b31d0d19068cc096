package chdb

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// lib holds the libchdb.so entry points this package uses. The signatures
// mirror chdb.h of chDB 26.7 (programs/local/chdb.h); every handle is an
// opaque pointer owned by the library.
type lib struct {
	setSignalHandlersEnabled func(enabled int32)
	connect                  func(argc int32, argv unsafe.Pointer) unsafe.Pointer
	closeConn                func(connp unsafe.Pointer)
	version                  func() unsafe.Pointer

	streamQueryN           func(conn unsafe.Pointer, query unsafe.Pointer, queryLen uintptr, format unsafe.Pointer, formatLen uintptr) unsafe.Pointer
	streamQueryWithParamsN func(conn unsafe.Pointer, query unsafe.Pointer, queryLen uintptr, format unsafe.Pointer, formatLen uintptr, names unsafe.Pointer, nameLens unsafe.Pointer, values unsafe.Pointer, valueLens unsafe.Pointer, count uintptr) unsafe.Pointer
	streamFetchResult      func(conn unsafe.Pointer, stream unsafe.Pointer) unsafe.Pointer
	streamCancelQuery      func(conn unsafe.Pointer, stream unsafe.Pointer)

	queryN           func(conn unsafe.Pointer, query unsafe.Pointer, queryLen uintptr, format unsafe.Pointer, formatLen uintptr) unsafe.Pointer
	queryWithParamsN func(conn unsafe.Pointer, query unsafe.Pointer, queryLen uintptr, format unsafe.Pointer, formatLen uintptr, names unsafe.Pointer, nameLens unsafe.Pointer, values unsafe.Pointer, valueLens unsafe.Pointer, count uintptr) unsafe.Pointer

	streamInsertN           func(conn unsafe.Pointer, query unsafe.Pointer, queryLen uintptr, format unsafe.Pointer, formatLen uintptr) unsafe.Pointer
	streamInsertWithParamsN func(conn unsafe.Pointer, query unsafe.Pointer, queryLen uintptr, format unsafe.Pointer, formatLen uintptr, names unsafe.Pointer, nameLens unsafe.Pointer, values unsafe.Pointer, valueLens unsafe.Pointer, count uintptr) unsafe.Pointer
	streamAppend            func(stream unsafe.Pointer, data unsafe.Pointer, n uintptr) int32
	streamDone              func(stream unsafe.Pointer) unsafe.Pointer
	streamCancelInsert      func(stream unsafe.Pointer)
	streamInsertError       func(stream unsafe.Pointer) unsafe.Pointer
	destroyInsertStream     func(stream unsafe.Pointer)

	classifyQueryN func(conn unsafe.Pointer, sql unsafe.Pointer, sqlLen uintptr, targetDB unsafe.Pointer, targetDBLen uintptr, out unsafe.Pointer) int32

	resultBuffer       func(res unsafe.Pointer) unsafe.Pointer
	resultLength       func(res unsafe.Pointer) uintptr
	resultError        func(res unsafe.Pointer) unsafe.Pointer
	resultElapsed      func(res unsafe.Pointer) float64
	resultRowsRead     func(res unsafe.Pointer) uint64
	resultBytesRead    func(res unsafe.Pointer) uint64
	resultRowsWritten  func(res unsafe.Pointer) uint64
	resultBytesWritten func(res unsafe.Pointer) uint64
	destroyQueryResult func(res unsafe.Pointer)
}

// loadLib dlopens path and resolves every symbol up front, so a library of
// the wrong version fails here with the missing name instead of later.
func loadLib(path string) (*lib, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	l := &lib{}
	syms := []struct {
		fn   any
		name string
	}{
		{&l.setSignalHandlersEnabled, "chdb_set_signal_handlers_enabled"},
		{&l.connect, "chdb_connect"},
		{&l.closeConn, "chdb_close_conn"},
		{&l.version, "chdb_version"},
		{&l.streamQueryN, "chdb_stream_query_n"},
		{&l.streamQueryWithParamsN, "chdb_stream_query_with_params_n"},
		{&l.streamFetchResult, "chdb_stream_fetch_result"},
		{&l.streamCancelQuery, "chdb_stream_cancel_query"},
		{&l.queryN, "chdb_query_n"},
		{&l.queryWithParamsN, "chdb_query_with_params_n"},
		{&l.streamInsertN, "chdb_stream_insert_n"},
		{&l.streamInsertWithParamsN, "chdb_stream_insert_with_params_n"},
		{&l.streamAppend, "chdb_stream_append"},
		{&l.streamDone, "chdb_stream_done"},
		{&l.streamCancelInsert, "chdb_stream_cancel_insert"},
		{&l.streamInsertError, "chdb_stream_insert_error"},
		{&l.destroyInsertStream, "chdb_destroy_insert_stream"},
		{&l.classifyQueryN, "chdb_classify_query_n"},
		{&l.resultBuffer, "chdb_result_buffer"},
		{&l.resultLength, "chdb_result_length"},
		{&l.resultError, "chdb_result_error"},
		{&l.resultElapsed, "chdb_result_elapsed"},
		{&l.resultRowsRead, "chdb_result_rows_read"},
		{&l.resultBytesRead, "chdb_result_bytes_read"},
		{&l.resultRowsWritten, "chdb_result_rows_written"},
		{&l.resultBytesWritten, "chdb_result_bytes_written"},
		{&l.destroyQueryResult, "chdb_destroy_query_result"},
	}
	for _, s := range syms {
		addr, err := purego.Dlsym(h, s.name)
		if err != nil {
			return nil, fmt.Errorf("%s does not export %s (need libchdb 26.7 or newer): %w", path, s.name, err)
		}
		purego.RegisterFunc(s.fn, addr)
	}
	return l, nil
}

// queryAnalysis is chdb_query_analysis_v1, filled by chdb_classify_query_n.
type queryAnalysis struct {
	structSize     uint32
	statementCount uint32
	flags          uint32
	queryClass     uint32
}

// goString copies a NUL-terminated C string; nil gives "".
func goString(p unsafe.Pointer) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(p, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(p), n))
}

// cBytes returns a pointer to b's bytes for a length-delimited C argument.
// An empty slice gives a pointer to a one-byte buffer, since the engine may
// dereference it even when the length is zero.
func cBytes(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		b = make([]byte, 1)
	}
	return unsafe.Pointer(&b[0])
}
