package tracing

import (
	"flag"
	"fmt"
)

// Flags are the --tracing-* flags of both binaries: one definition of their names, defaults
// and checks.
type Flags struct {
	endpoint, protocol string
	ratio              float64
	trustParent        bool
}

// Register adds the flags to fs; spans names what the binary traces ("request spans").
func (f *Flags) Register(fs *flag.FlagSet, spans string) {
	fs.StringVar(&f.endpoint, "tracing-endpoint", "",
		"OTLP collector URL that "+spans+" are exported to: http://host:port (plaintext) or https://host:port (TLS, system roots); tracing is off when empty.")
	fs.StringVar(&f.protocol, "tracing-protocol", ProtocolGRPC, "OTLP protocol of --tracing-endpoint: "+ProtocolGRPC+" or "+ProtocolHTTP+".")
	fs.Float64Var(&f.ratio, "tracing-sampling-ratio", 1,
		"Share of the traces that are recorded, 0 to 1.")
}

// RegisterParentSampling adds --tracing-trust-parent-sampling to fs, for a binary that traces
// requests from callers (the proxy).
func (f *Flags) RegisterParentSampling(fs *flag.FlagSet) {
	fs.BoolVar(&f.trustParent, "tracing-trust-parent-sampling", false,
		"Follow the sampled flag of a request's traceparent instead of --tracing-sampling-ratio. Off, the caller's trace is continued but the proxy decides whether to record it, so that no client can fill the export queue: turn it on only where every caller is trusted (behind another proxy that decides).")
}

// Options returns the tracer options the flags give, for service; on is false when tracing is
// off. A bad endpoint, protocol or ratio is an error naming the flags.
func (f *Flags) Options(service string) (opts Options, on bool, err error) {
	if f.endpoint == "" {
		return Options{}, false, nil
	}
	opts = Options{ServiceName: service, Endpoint: f.endpoint, Protocol: f.protocol, SamplingRatio: f.ratio, TrustParentSampling: f.trustParent}
	if err := opts.Check(); err != nil {
		return Options{}, false, fmt.Errorf("--tracing-*: %w", err)
	}
	return opts, true, nil
}
