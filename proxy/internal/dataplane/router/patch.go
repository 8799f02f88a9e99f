package router

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
)

// orderGap spaces the orders of a virtual host's routes as they are first compiled: twenty
// routes can then be inserted one after another at the same place before the virtual host has
// to be renumbered.
const orderGap = 1 << 20

// refreshListener returns an unchanged listener for this table: itself, unless a certificate
// or a cluster its virtual hosts depend on changed.
func (c *compiler) refreshListener(old *compiledListener) (*compiledListener, error) {
	if slices.ContainsFunc(old.vhosts, func(vh *VirtualHost) bool { return vh.src == nil && c.clusterMoved(vh.refs) }) {
		// Routes to recompile whose encoding split could not locate: decode the listener, which
		// decoded before.
		var in discoveryv1.Listener
		if err := old.src.UnmarshalTo(&in); err != nil {
			return nil, fmt.Errorf("listener %s: %w: %w", old.name, ErrInvalid, err)
		}
		return c.listener(&in, old.src)
	}
	var vhosts []*VirtualHost
	var errs []error
	for i, vh := range old.vhosts {
		out, err := c.refresh(vh)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if out != vh && vhosts == nil {
			vhosts = slices.Clone(old.vhosts)
		}
		if vhosts != nil {
			vhosts[i] = out
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("listener %s: %w", old.name, err)
	}
	if vhosts == nil {
		return old, nil
	}
	l := *old
	l.vhosts = vhosts
	return &l, nil
}

// refresh returns an unchanged virtual host for this table: itself when neither its
// certificates nor the presence of the clusters its routes name changed, else a copy with its
// certificates looked up again and the routes naming a cluster that came or went recompiled.
func (c *compiler) refresh(vh *VirtualHost) (*VirtualHost, error) {
	certs := slices.ContainsFunc(vh.Certificates, func(cert *Certificate) bool { return c.certsChanged[cert.Name] })
	moved := c.clusterMoved(vh.refs)
	if !certs && !moved {
		return vh, nil
	}
	out := *vh
	if certs {
		names := make([]string, len(vh.Certificates))
		for i, cert := range vh.Certificates {
			names[i] = cert.Name
		}
		var err error
		if out.Certificates, err = c.lookupCertificates(vh.Name, names); err != nil {
			return nil, err
		}
	}
	if moved {
		if _, err := c.patchRoutes(&out, vh); err != nil {
			return nil, fmt.Errorf("virtual host %s: %w", vh.Name, err)
		}
	}
	return &out, nil
}

// patchListener compiles a changed listener from its previous compilation old, decoding and
// compiling only the virtual hosts and routes whose encoding changed. It reports false when
// the payload holds what split refuses or does not decode; the caller then compiles it whole,
// which gives the same table or the error Compile gives.
func (c *compiler) patchListener(old *compiledListener, e entry[*discoveryv1.Listener]) (*compiledListener, bool, error) {
	b := e.src.GetValue()
	head, vspans, ok := split(b, listenerVirtualHosts, len(old.vhosts))
	if !ok {
		return nil, false, nil
	}
	var in discoveryv1.Listener
	if !decodes(head, &in) || in.GetName() != e.name {
		return nil, false, nil
	}
	p, err := listenerProtocol(&in)
	if err != nil {
		return nil, true, err
	}
	validation, err := clientValidation(&in, p)
	if err != nil {
		return nil, true, err
	}
	l := &compiledListener{name: in.GetName(), src: e.src, port: in.GetPort(), proto: p, vhosts: make([]*VirtualHost, len(vspans)), validation: validation}
	var errs []error
	for i, sp := range vspans {
		var prev *VirtualHost
		if i < len(old.vhosts) && old.proto == p {
			prev = old.vhosts[i]
		}
		vh, ok, err := c.patchVirtualHost(l, prev, sp.of(b))
		if !ok {
			return nil, false, nil
		}
		errs = append(errs, err)
		l.vhosts[i] = vh
	}
	if err := errors.Join(errs...); err != nil {
		return nil, true, fmt.Errorf("listener %s: %w", l.name, err)
	}
	return l, true, nil
}

// patchVirtualHost compiles the virtual host encoded as b in listener l from prev, the virtual
// host at its place before (nil for none). ok is false when b holds what split refuses or does
// not decode.
func (c *compiler) patchVirtualHost(l *compiledListener, prev *VirtualHost, b []byte) (vh *VirtualHost, ok bool, err error) {
	if prev != nil && prev.src != nil && bytes.Equal(prev.src, b) {
		moved := *prev
		moved.src = b // let the previous payload go
		vh, err := c.refresh(&moved)
		return vh, true, err
	}
	hint := 0
	if prev != nil {
		hint = len(prev.spans) + 1
	}
	head, spans, ok := split(b, virtualHostRoutes, hint)
	if !ok {
		return nil, false, nil
	}
	var in discoveryv1.VirtualHost
	if !decodes(head, &in) {
		return nil, false, nil
	}
	out, err := c.vhostHeader(l.name, l.proto, &in)
	if err != nil {
		return nil, true, err
	}
	out.src, out.spans = b, spans
	if prev == nil || prev.src == nil {
		prev = &VirtualHost{}
	}
	ok, err = c.patchRoutes(out, prev)
	if err != nil {
		return nil, ok, fmt.Errorf("virtual host %s: %w", out.Name, err)
	}
	return out, ok, nil
}
