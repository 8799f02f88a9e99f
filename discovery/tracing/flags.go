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
}

// Register adds the flags to fs; spans names what the binary traces ("request spans").
func (f *Flags) Register(fs *flag.FlagSet, spans string) {
	fs.StringVar(&f.endpoint, "tracing-endpoint", "",
		"OTLP collector URL that "+spans+" are exported to: http://host:port (plaintext) or https://host:port (TLS, system roots); tracing is off when empty.")
	fs.StringVar(&f.protocol, "tracing-protocol", ProtocolGRPC, "OTLP protocol of --tracing-endpoint: "+ProtocolGRPC+" or "+ProtocolHTTP+".")
	fs.Float64Var(&f.ratio, "tracing-sampling-ratio", 1,
		"Share of the traces that start here that are recorded, 0 to 1; a request whose traceparent carries the caller's decision follows it.")
}

// Options returns the tracer options the flags give, for service; on is false when tracing is
// off. A bad endpoint, protocol or ratio is an error naming the flags.
func (f *Flags) Options(service string) (opts Options, on bool, err error) {
	if f.endpoint == "" {
		return Options{}, false, nil
	}
	opts = Options{ServiceName: service, Endpoint: f.endpoint, Protocol: f.protocol, SamplingRatio: f.ratio}
	if err := opts.Check(); err != nil {
		return Options{}, false, fmt.Errorf("--tracing-*: %w", err)
	}
	return opts, true, nil
}
