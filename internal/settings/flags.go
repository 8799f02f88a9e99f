package settings

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"
)

// Flags holds the operator's command-line flags for its settings. Each flag's default comes from
// its environment variable when that is set, and from the built-in default otherwise, so the
// precedence is: built-in default < environment < flag < CoxswainConfig.
type Flags struct {
	caMode        string
	caSecret      string
	trustDomain   string
	svidTTL       string
	port          int
	bootstrapPort int
	maxStreams    int
	proxyImage    string
	proxyReplicas int
	envErr        error
}

// RegisterFlags registers the settings flags on fs, reading defaults through lookup (os.LookupEnv
// in production).
func RegisterFlags(fs *flag.FlagSet, lookup func(string) (string, bool)) *Flags {
	d := Defaults()
	f := &Flags{}
	var errs []error
	env := func(name, fallback string) string {
		if v, ok := lookup(name); ok && v != "" {
			return v
		}
		return fallback
	}
	envPort := func(name string, fallback int32) int {
		v, ok := lookup(name)
		if !ok || v == "" {
			return int(fallback)
		}
		p, err := parsePort(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %w", ErrInvalid, name, err))
			return int(fallback)
		}
		return int(p)
	}
	envInt := func(name string, fallback int32) int {
		v, ok := lookup(name)
		if !ok || v == "" {
			return int(fallback)
		}
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %q is not a number", ErrInvalid, name, v))
			return int(fallback)
		}
		return int(n)
	}
	fs.StringVar(&f.caMode, "discovery-ca-mode", env(EnvCAMode, string(d.CAMode)),
		"How the discovery CA is provisioned: Auto or External. Env "+EnvCAMode+".")
	fs.StringVar(&f.caSecret, "discovery-ca-secret", env(EnvCASecret, d.CASecretName),
		"Name of the CA Secret in the operator's namespace. Env "+EnvCASecret+".")
	fs.StringVar(&f.trustDomain, "discovery-trust-domain", env(EnvTrustDomain, d.TrustDomain),
		"SPIFFE trust domain of issued identities. Env "+EnvTrustDomain+".")
	fs.StringVar(&f.svidTTL, "discovery-svid-ttl", env(EnvSVIDTTL, d.SVIDTTL.String()),
		"Lifetime of proxy certificates, 1m to 720h. Env "+EnvSVIDTTL+".")
	fs.IntVar(&f.port, "discovery-port", envPort(EnvPort, d.Port),
		"Port of the mTLS snapshot stream listener. Env "+EnvPort+".")
	fs.IntVar(&f.bootstrapPort, "discovery-bootstrap-port", envPort(EnvBootstrapPort, d.BootstrapPort),
		"Port of the bootstrap listener. Env "+EnvBootstrapPort+".")
	fs.IntVar(&f.maxStreams, "discovery-max-streams-per-identity", envInt(EnvMaxStreamsPerIdentity, d.MaxStreamsPerIdentity),
		"Live snapshot streams one proxy identity may hold. Env "+EnvMaxStreamsPerIdentity+".")
	fs.StringVar(&f.proxyImage, "proxy-image", env(EnvProxyImage, d.ProxyImage), "Default proxy container image. Env "+EnvProxyImage+".")
	fs.IntVar(&f.proxyReplicas, "proxy-replicas", int(d.ProxyReplicas), "Default number of proxy pods.")
	f.envErr = errors.Join(errs...)
	return f
}

// Settings returns the settings the flags and environment give, or every problem they have.
func (f *Flags) Settings() (Settings, error) {
	s := Defaults()
	errs := []error{f.envErr}
	mode, err := ParseCAMode(f.caMode)
	if err != nil {
		errs = append(errs, fmt.Errorf("%w: --discovery-ca-mode: %w", ErrInvalid, err))
	}
	ttl, err := time.ParseDuration(f.svidTTL)
	if err != nil {
		errs = append(errs, fmt.Errorf("%w: --discovery-svid-ttl: %w", ErrInvalid, err))
	}
	s.CAMode, s.SVIDTTL = mode, ttl
	s.CASecretName, s.TrustDomain = f.caSecret, f.trustDomain
	s.Port, s.BootstrapPort = int32(f.port), int32(f.bootstrapPort)      //nolint:gosec // range-checked by Validate
	s.MaxStreamsPerIdentity = int32(f.maxStreams)                        //nolint:gosec // range-checked by Validate
	s.ProxyImage, s.ProxyReplicas = f.proxyImage, int32(f.proxyReplicas) //nolint:gosec // range-checked by Validate
	if err := errors.Join(errs...); err != nil {
		return Settings{}, err
	}
	if err := s.Validate(); err != nil {
		return Settings{}, err
	}
	return s, nil
}
