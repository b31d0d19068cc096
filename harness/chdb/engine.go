package chdb

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"
)

// opened records that this process has started the engine. libchdb runs one
// engine per process, bound to the data path of its first connection, so this
// is process-wide by nature rather than by choice.
var opened atomic.Bool

// insertChunkSize is how much INSERT data is handed to the engine per call:
// large enough to keep per-call overhead negligible, small enough that a huge
// batch is never held in memory twice.
const insertChunkSize = 1 << 20

// Engine is the ClickHouse engine of libchdb.so, opened once per process.
//
// The engine has one session: a current database and session settings that
// persist between statements. Engine runs one statement at a time (callers
// queue in arrival order, and stop waiting when their context ends) and
// gives each statement the database and settings of its Statement, restoring
// the session's own values afterwards, so statements do not leak state into
// each other. It is safe for concurrent use.
type Engine struct {
	lib     *lib
	connp   unsafe.Pointer // chdb_connection*, as chdb_connect returned it
	conn    unsafe.Pointer // chdb_connection
	version string

	// turn is a one-slot semaphore: holding it means owning the connection.
	// A channel rather than a mutex, so waiting can stop when a context ends.
	turn chan struct{}

	// The fields below are owned by whoever holds turn.
	closed   bool
	database string            // current database of the session; "" when unknown
	applied  map[string]string // settings changed for statements: name -> value now in effect
	original map[string]string // name -> session value before the first change
}

// Open loads libchdb.so from libPath and starts the engine with its data in
// dataPath (created if missing). Only one engine can run in a process: a
// second Open, even after Close, returns ErrAlreadyOpen.
//
// Open disables the engine's own signal handlers and keeps the Go runtime's
// handlers in place across the engine's start-up, which would otherwise
// replace them and break the runtime (preemption, nil-pointer panics).
func Open(libPath, dataPath string) (*Engine, error) {
	if libPath == "" {
		return nil, errors.New("chdb: no library path given")
	}
	if dataPath == "" {
		return nil, errors.New("chdb: no data path given")
	}
	if fi, err := os.Stat(libPath); err != nil {
		return nil, fmt.Errorf("chdb: library %s: %w", libPath, err)
	} else if fi.IsDir() {
		return nil, fmt.Errorf("chdb: library %s is a directory, want the path of libchdb.so", libPath)
	}
	absData, err := filepath.Abs(dataPath)
	if err != nil {
		return nil, fmt.Errorf("chdb: data path %s: %w", dataPath, err)
	}
	if err := checkWritableDir(absData); err != nil {
		return nil, err
	}
	if !opened.CompareAndSwap(false, true) {
		return nil, ErrAlreadyOpen
	}
	l, err := loadLib(libPath)
	if err != nil {
		// Nothing of the engine started, so a later Open may try again.
		opened.Store(false)
		return nil, fmt.Errorf("chdb: %w", err)
	}
	return connect(l, absData)
}

// connect starts the engine. Whatever happens, the engine may have been
// (partly) started, so Open is not retried after it.
func connect(l *lib, dataPath string) (*Engine, error) {
	restore, err := preserveSignals()
	if err != nil {
		return nil, fmt.Errorf("chdb: %w", err)
	}
	l.setSignalHandlersEnabled(0)

	args := []string{"walhouse-chdb", "--path=" + dataPath}
	keep := make([][]byte, len(args))
	argv := make([]unsafe.Pointer, len(args))
	var pin runtime.Pinner
	defer pin.Unpin()
	for i, a := range args {
		keep[i] = append([]byte(a), 0)
		pin.Pin(&keep[i][0])
		argv[i] = unsafe.Pointer(&keep[i][0])
	}
	connp := l.connect(int32(len(argv)), unsafe.Pointer(&argv[0]))
	runtime.KeepAlive(keep)
	if err := restore(); err != nil {
		return nil, fmt.Errorf("chdb: after engine start-up: %w", err)
	}
	if connp == nil || *(*unsafe.Pointer)(connp) == nil {
		return nil, fmt.Errorf("chdb: the engine did not start with data path %s (chdb_connect failed; see its messages above; is another process using the path?)", dataPath)
	}
	return &Engine{
		lib:      l,
		connp:    connp,
		conn:     *(*unsafe.Pointer)(connp),
		version:  goString(l.version()),
		turn:     make(chan struct{}, 1),
		applied:  map[string]string{},
		original: map[string]string{},
	}, nil
}

// checkWritableDir creates dir if needed and proves it writable, so a bad
// path fails with the reason instead of a late engine error.
func checkWritableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("chdb: cannot create data path %s (%w); pass a writable directory", dir, err)
	}
	f, err := os.CreateTemp(dir, ".walhouse-write-check-*")
	if err != nil {
		return fmt.Errorf("chdb: data path %s is not writable (%w); pass a writable directory", dir, err)
	}
	name := f.Name()
	_ = f.Close()
	return os.Remove(name)
}

// Version returns the engine's version, e.g. "26.7.3".
func (e *Engine) Version() string { return e.version }

// Close stops the engine after the running statement, if any, ends. Calls
// after Close return ErrClosed. The engine cannot be opened again in this
// process.
func (e *Engine) Close() error {
	e.turn <- struct{}{}
	defer func() { <-e.turn }()
	if e.closed {
		return nil
	}
	e.closed = true
	e.lib.closeConn(e.connp)
	return nil
}

// acquire takes the connection, or gives up when ctx ends first.
func (e *Engine) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case e.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if e.closed {
		<-e.turn
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		<-e.turn
		return err
	}
	return nil
}

func (e *Engine) release() { <-e.turn }

// Statement is one SQL statement with the session state it runs in.
type Statement struct {
	// SQL is the statement text. For Insert it is the INSERT without its
	// FORMAT clause and data, e.g. "INSERT INTO db.t (a, b)".
	SQL string
	// Format is the output format of a query (the default when the SQL has
	// no FORMAT clause), or the input format of Insert data.
	// Empty means TabSeparated.
	Format string
	// Database is the current database for the statement; empty means
	// "default".
	Database string
	// Params are server-side query parameters for {name:Type} placeholders.
	Params map[string]string
	// Settings are ClickHouse settings for this statement only.
	Settings map[string]string
}

// Progress is what the engine reports about a finished statement. For a
// streamed query it sums what the engine reported per chunk.
type Progress struct {
	RowsRead     uint64
	BytesRead    uint64
	RowsWritten  uint64
	BytesWritten uint64
	Elapsed      time.Duration
}

// Query runs query and returns its whole output in format.
func (e *Engine) Query(ctx context.Context, query, format string) ([]byte, error) {
	var out bytes.Buffer
	_, err := e.Run(ctx, Statement{SQL: query, Format: format}, &out)
	return out.Bytes(), err
}

// QueryWithParams runs query with server-side parameters bound to its
// {name:Type} placeholders and returns its whole output in format.
func (e *Engine) QueryWithParams(ctx context.Context, query, format string, params map[string]string) ([]byte, error) {
	var out bytes.Buffer
	_, err := e.Run(ctx, Statement{SQL: query, Format: format, Params: params}, &out)
	return out.Bytes(), err
}

// Insert runs insertPrefix (an INSERT without FORMAT clause, e.g.
// "INSERT INTO db.t") with data in format read from data, which is streamed
// to the engine in chunks, never held whole.
func (e *Engine) Insert(ctx context.Context, insertPrefix, format string, data io.Reader) error {
	_, err := e.InsertFrom(ctx, Statement{SQL: insertPrefix, Format: format}, data)
	return err
}

// Run executes st and streams its output to out as the engine produces it.
// out must not block indefinitely: the engine serves nobody else meanwhile.
// When ctx ends, the statement is cancelled at the next chunk boundary;
// a single long engine step cannot be interrupted, so bound heavy queries
// with the max_execution_time setting.
//
// A SET statement is refused: settings belong in Statement.Settings, since
// a SET would change the shared session for every later statement.
func (e *Engine) Run(ctx context.Context, st Statement, out io.Writer) (Progress, error) {
	switch leadingKeyword(st.SQL) {
	case "SET":
		return Progress{}, errorf(CodeUnsupportedMethod, "SET statements would change the engine's shared session; pass settings with the statement instead")
	}
	if err := e.acquire(ctx); err != nil {
		return Progress{}, err
	}
	defer e.release()
	if err := e.prepare(st); err != nil {
		return Progress{}, err
	}
	if leadingKeyword(st.SQL) == "USE" {
		// A USE moves the session; force the next statement to set its own.
		defer func() { e.database = "" }()
	}
	if streamable(st.SQL) {
		return e.stream(ctx, st, out)
	}
	if err := e.singleStatement(st.SQL); err != nil {
		return Progress{}, err
	}
	return e.queryAll(st, out)
}

// InsertFrom executes st, an INSERT without FORMAT clause, with data in
// st.Format read from data in chunks. When ctx ends or data fails, the
// insert is cancelled; ClickHouse has no rollback, so blocks the engine had
// already completed may stay inserted.
func (e *Engine) InsertFrom(ctx context.Context, st Statement, data io.Reader) (Progress, error) {
	if err := e.acquire(ctx); err != nil {
		return Progress{}, err
	}
	defer e.release()
	if err := e.singleStatement(st.SQL); err != nil {
		return Progress{}, err
	}
	if err := e.prepare(st); err != nil {
		return Progress{}, err
	}
	return e.insert(ctx, st, data)
}

// singleStatement refuses text holding more than one statement, as
// ClickHouse's HTTP interface does. The engine's one-shot API would run them
// all, and a SET or USE among them would change the session shared by every
// later statement. The streaming API refuses them by itself. Its caller
// holds turn.
func (e *Engine) singleStatement(sql string) error {
	q := []byte(sql)
	a := queryAnalysis{structSize: uint32(unsafe.Sizeof(queryAnalysis{}))}
	state := e.lib.classifyQueryN(e.conn, cBytes(q), uintptr(len(q)), nil, 0, unsafe.Pointer(&a))
	runtime.KeepAlive(q)
	if state != 0 {
		return errorf(CodeUnknownException, "the engine could not analyse the statement")
	}
	if a.statementCount > 1 {
		return errorf(CodeSyntaxError, fmt.Sprintf("Multi-statements are not allowed: the text holds %d statements; send one per request", a.statementCount))
	}
	return nil
}

// plainCall and paramsCall are the shapes of the engine's entry points
// (query, stream query, stream insert) without and with query parameters.
type (
	plainCall  func(conn, query unsafe.Pointer, queryLen uintptr, format unsafe.Pointer, formatLen uintptr) unsafe.Pointer
	paramsCall func(conn, query unsafe.Pointer, queryLen uintptr, format unsafe.Pointer, formatLen uintptr, names, nameLens, values, valueLens unsafe.Pointer, count uintptr) unsafe.Pointer
)

// call passes st to an entry point of the engine: withParams when st has
// query parameters, plain otherwise, keeping st's bytes alive for the
// call. It returns the entry point's handle, nil when it failed.
func (e *Engine) call(st Statement, plain plainCall, withParams paramsCall) unsafe.Pointer {
	q := []byte(st.SQL)
	f := []byte(formatOrDefault(st.Format))
	var h unsafe.Pointer
	if len(st.Params) > 0 {
		p := newParamArrays(st.Params)
		h = withParams(e.conn, cBytes(q), uintptr(len(q)), cBytes(f), uintptr(len(f)),
			p.names(), p.nameLens(), p.values(), p.valueLens(), p.count())
		p.unpin()
	} else {
		h = plain(e.conn, cBytes(q), uintptr(len(q)), cBytes(f), uintptr(len(f)))
	}
	runtime.KeepAlive(q)
	runtime.KeepAlive(f)
	return h
}

// stream runs st through the streaming query API. Its caller holds turn.
func (e *Engine) stream(ctx context.Context, st Statement, out io.Writer) (Progress, error) {
	res := e.call(st, e.lib.streamQueryN, e.lib.streamQueryWithParamsN)
	return e.withResult(res, "result handle", func(res unsafe.Pointer) (Progress, error) {
		var pr Progress
		for {
			if err := ctx.Err(); err != nil {
				e.lib.streamCancelQuery(e.conn, res)
				return pr, err
			}
			chunk := e.lib.streamFetchResult(e.conn, res)
			if chunk == nil {
				return pr, errorf(CodeUnknownException, "the engine returned no result chunk")
			}
			n, werr, eerr := e.drain(chunk, out, &pr)
			if eerr != nil {
				return pr, eerr
			}
			if werr != nil {
				e.lib.streamCancelQuery(e.conn, res)
				return pr, fmt.Errorf("write query output: %w", werr)
			}
			if n == 0 {
				return pr, nil
			}
		}
	})
}

// withResult calls use with res, a query result the engine returned, and
// destroys it after; a missing result (what names it) and the engine's
// error in it are errors, and use is not called.
func (e *Engine) withResult(res unsafe.Pointer, what string, use func(res unsafe.Pointer) (Progress, error)) (Progress, error) {
	if res == nil {
		return Progress{}, errorf(CodeUnknownException, "the engine returned no "+what)
	}
	defer e.lib.destroyQueryResult(res)
	if msg := goString(e.lib.resultError(res)); msg != "" {
		return Progress{}, parseError(msg)
	}
	return use(res)
}

// queryAll runs st through the one-shot query API, for statements the
// engine cannot stream (DDL, INSERT … VALUES, SHOW, …), whose output is
// small. Its caller holds turn.
func (e *Engine) queryAll(st Statement, out io.Writer) (Progress, error) {
	res := e.call(st, e.lib.queryN, e.lib.queryWithParamsN)
	if res == nil {
		return Progress{}, errorf(CodeUnknownException, "the engine returned no result")
	}
	var pr Progress
	_, werr, eerr := e.drain(res, out, &pr)
	if eerr != nil {
		return pr, eerr
	}
	if werr != nil {
		return pr, fmt.Errorf("write query output: %w", werr)
	}
	return pr, nil
}

// drain writes one fetched chunk to out, adds its statistics to pr and
// destroys it. It returns the chunk's length, out's error and the engine's.
func (e *Engine) drain(chunk unsafe.Pointer, out io.Writer, pr *Progress) (int, error, error) {
	defer e.lib.destroyQueryResult(chunk)
	if msg := goString(e.lib.resultError(chunk)); msg != "" {
		return 0, nil, parseError(msg)
	}
	pr.add(e.lib, chunk)
	n := int(e.lib.resultLength(chunk))
	if n == 0 {
		return 0, nil, nil
	}
	// The chunk is written straight from engine memory: io.Writer must not
	// retain p, so nothing refers to it after destroyQueryResult.
	_, err := out.Write(unsafe.Slice((*byte)(e.lib.resultBuffer(chunk)), n))
	return n, err, nil
}

func (p *Progress) add(l *lib, res unsafe.Pointer) {
	p.RowsRead += l.resultRowsRead(res)
	p.BytesRead += l.resultBytesRead(res)
	p.RowsWritten += l.resultRowsWritten(res)
	p.BytesWritten += l.resultBytesWritten(res)
	p.Elapsed += time.Duration(l.resultElapsed(res) * float64(time.Second))
}

// insert runs the stream-insert API; its caller holds turn. Inline data in
// a plain query is cut by the engine at the first blank line, which binary
// formats contain, so INSERT data always goes through this path.
func (e *Engine) insert(ctx context.Context, st Statement, data io.Reader) (Progress, error) {
	s := e.call(st, e.lib.streamInsertN, e.lib.streamInsertWithParamsN)
	if s == nil {
		return Progress{}, errorf(CodeUnknownException, "the engine returned no insert stream")
	}
	defer e.lib.destroyInsertStream(s)
	if msg := goString(e.lib.streamInsertError(s)); msg != "" {
		return Progress{}, parseError(msg)
	}
	buf := make([]byte, insertChunkSize)
	for {
		if err := ctx.Err(); err != nil {
			e.lib.streamCancelInsert(s)
			return Progress{}, err
		}
		n, rerr := io.ReadFull(data, buf)
		if n > 0 {
			if rc := e.lib.streamAppend(s, unsafe.Pointer(&buf[0]), uintptr(n)); rc != 0 {
				msg := goString(e.lib.streamInsertError(s))
				if msg == "" {
					msg = "Code: 1002. DB::Exception: the engine refused INSERT data"
				}
				return Progress{}, parseError(msg)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			e.lib.streamCancelInsert(s)
			return Progress{}, fmt.Errorf("read INSERT data: %w", rerr)
		}
	}
	runtime.KeepAlive(buf)
	return e.withResult(e.lib.streamDone(s), "insert result", func(res unsafe.Pointer) (Progress, error) {
		var pr Progress
		pr.add(e.lib, res)
		return pr, nil
	})
}

// exec runs an internal statement and returns its whole output; its caller
// holds turn.
func (e *Engine) exec(query, format string) ([]byte, error) {
	var out bytes.Buffer
	_, err := e.queryAll(Statement{SQL: query, Format: format}, &out)
	return out.Bytes(), err
}

// prepare gives the session st's database and settings; its caller holds
// turn. Only differences from the session's current state cost a statement.
func (e *Engine) prepare(st Statement) error {
	db := st.Database
	if db == "" {
		db = "default"
	}
	if db != e.database {
		e.database = ""
		if _, err := e.exec("USE "+quoteIdent(db), "TabSeparated"); err != nil {
			return err
		}
		e.database = db
	}
	return e.applySettings(st.Settings)
}

// applySettings makes the session's settings equal to its original values
// plus want, with one SET statement. The original value of a setting is
// looked up the first time it is changed.
func (e *Engine) applySettings(want map[string]string) error {
	var fresh []string
	for name := range want {
		if !validSettingName(name) {
			return errorf(CodeUnknownSetting, fmt.Sprintf("invalid setting name %q", name))
		}
		if _, ok := e.original[name]; !ok {
			fresh = append(fresh, name)
		}
	}
	if len(fresh) > 0 {
		if err := e.lookupOriginals(fresh); err != nil {
			return err
		}
	}
	var changes []settingChange
	for name, v := range want {
		if cur, ok := e.applied[name]; !ok || cur != v {
			changes = append(changes, settingChange{name, v})
		}
	}
	for name := range e.applied {
		if _, ok := want[name]; !ok {
			changes = append(changes, settingChange{name, e.original[name]})
		}
	}
	if len(changes) == 0 {
		return nil
	}
	if _, err := e.exec(setStatement(changes), "TabSeparated"); err != nil {
		// A failed SET may have applied some changes: put back what the
		// session is known to hold, with values that were accepted before.
		var known []settingChange
		for _, c := range changes {
			if v, ok := e.applied[c.name]; ok {
				known = append(known, settingChange{c.name, v})
			} else {
				known = append(known, settingChange{c.name, e.original[c.name]})
			}
		}
		if _, rerr := e.exec(setStatement(known), "TabSeparated"); rerr != nil {
			return errors.Join(err, fmt.Errorf("chdb: restoring session settings after a failed SET: %w", rerr))
		}
		return err
	}
	for _, c := range changes {
		if _, ok := want[c.name]; ok {
			e.applied[c.name] = c.value
		} else {
			delete(e.applied, c.name)
		}
	}
	return nil
}

// lookupOriginals records the session values of names; a name the engine
// does not know is an error, as on a server.
func (e *Engine) lookupOriginals(names []string) error {
	lits := make([]string, len(names))
	for i, n := range names {
		lits[i] = quoteString(n)
	}
	out, err := e.exec("SELECT name, value FROM system.settings WHERE name IN ("+strings.Join(lits, ", ")+")", "JSONCompactEachRow")
	if err != nil {
		return err
	}
	found := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var row [2]string
		if err := dec.Decode(&row); err != nil {
			return fmt.Errorf("chdb: read system.settings: %w", err)
		}
		found[row[0]] = row[1]
	}
	for _, n := range names {
		v, ok := found[n]
		if !ok {
			return errorf(CodeUnknownSetting, fmt.Sprintf("Setting %s is neither a builtin setting nor started with the prefix 'custom_' registered for user-defined settings", n))
		}
		e.original[n] = v
	}
	return nil
}

func formatOrDefault(f string) string {
	if f == "" {
		return "TabSeparated"
	}
	return f
}

// paramArrays lays out query parameters as the C arrays of
// chdb_*_with_params_n, pinned for the duration of the call.
type paramArrays struct {
	namePtrs, valuePtrs []unsafe.Pointer
	nameLen, valueLen   []uintptr
	keep                [][]byte
	pin                 runtime.Pinner
}

func newParamArrays(params map[string]string) *paramArrays {
	p := &paramArrays{}
	for name, value := range params {
		nb, vb := []byte(name), []byte(value)
		p.keep = append(p.keep, nb, vb)
		np, vp := cBytes(nb), cBytes(vb)
		p.pin.Pin(np)
		p.pin.Pin(vp)
		p.namePtrs = append(p.namePtrs, np)
		p.valuePtrs = append(p.valuePtrs, vp)
		p.nameLen = append(p.nameLen, uintptr(len(nb)))
		p.valueLen = append(p.valueLen, uintptr(len(vb)))
	}
	return p
}

func (p *paramArrays) names() unsafe.Pointer     { return unsafe.Pointer(&p.namePtrs[0]) }
func (p *paramArrays) values() unsafe.Pointer    { return unsafe.Pointer(&p.valuePtrs[0]) }
func (p *paramArrays) nameLens() unsafe.Pointer  { return unsafe.Pointer(&p.nameLen[0]) }
func (p *paramArrays) valueLens() unsafe.Pointer { return unsafe.Pointer(&p.valueLen[0]) }
func (p *paramArrays) count() uintptr            { return uintptr(len(p.namePtrs)) }
func (p *paramArrays) unpin() {
	runtime.KeepAlive(p.keep)
	p.pin.Unpin()
}
