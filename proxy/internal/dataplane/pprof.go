package dataplane

import (
	"net/http"
	"net/http/pprof"
)

// RegisterPprof serves the runtime profiles under /debug/pprof/ on mux. Main calls it on the
// telemetry mux only when profiling is asked for, since profiles expose internals.
func RegisterPprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
