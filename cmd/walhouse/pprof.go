package main

import (
	"net/http"
	"net/http/pprof"
)

// pprofEnv turns on Go's profiling endpoints (/debug/pprof/) on the
// --metrics-addr of capture and sink when it is "1". Off by default: a
// profile exposes the process's code paths and costs CPU while it runs, so
// an operator turns it on for an investigation (and `make bench-e2e
// PROFILE=1` does, to show where a load's time goes).
const pprofEnv = "WALHOUSE_PPROF"

// withPprof serves net/http/pprof's handlers beside h when on, all but
// /debug/pprof/cmdline: a command line may hold a DSN with its password.
func withPprof(h http.Handler, on bool) http.Handler {
	if !on {
		return h
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/", h)
	return mux
}
