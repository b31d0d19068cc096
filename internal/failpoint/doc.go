// Package failpoint names the points of capture and the sink where fault
// tests make walhouse crash or fail, and holds which of them a process was
// told to trigger.
//
// A Set is parsed once, by cmd/walhouse (cli.Failpoints reads
// WALHOUSE_FAILPOINTS), and handed to capture, the sink and the ClickHouse
// writer through their options (pipeline's settings carry them); the
// packages call At or Err at their named points. A nil *Set, what
// production runs with, turns every point off: each call is a nil check and
// returns. There is no package-level state.
//
// The specification is a comma-separated list of name=action, with the
// action one of
//
//	crash      exit at the first hit, like kill -9 there (status 137)
//	crash@N    exit at the Nth hit (N from 1)
//	error      fail every hit of an error point (Err) with ErrInjected
//	error:N    fail its first N hits, then pass
//	pause:D    hold every hit for the duration D (e.g. 3s): a slow step, so
//	           that what runs beside it meets the state the point is in
//
// for example WALHOUSE_FAILPOINTS=sink.loaded=crash@3,sink.inserted=error:2.
// Crash points (At) take crash and pause actions; error points (Err) take
// every action.
// Data enters as that string and leaves as a process exit or an error.
package failpoint
