package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// configureLoopbackNetlink does what `ip link set lo up; ip addr add BackendNetwork dev lo`
// does, for machines without iproute2.
func configureLoopbackNetlink() error {
	prefix, err := netip.ParsePrefix(BackendNetwork)
	if err != nil {
		return fmt.Errorf("parse %s: %w", BackendNetwork, err)
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return fmt.Errorf("find the loopback: %w", err)
	}
	return withRouteSocket(func(s *routeSocket) error {
		if err := s.setUp(lo.Index); err != nil {
			return err
		}
		return s.addAddress(lo.Index, prefix)
	})
}

// routeSocket is a NETLINK_ROUTE socket that sends one request at a time and waits for its
// acknowledgement.
type routeSocket struct {
	fd  int
	seq uint32
}

func withRouteSocket(f func(*routeSocket) error) error {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, syscall.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("open netlink socket: %w", err)
	}
	defer syscall.Close(fd) //nolint:errcheck // nothing was written that a close could lose
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return fmt.Errorf("bind netlink socket: %w", err)
	}
	return f(&routeSocket{fd: fd})
}

// setUp sets IFF_UP on interface index (RTM_NEWLINK with an ifinfomsg).
func (s *routeSocket) setUp(index int) error {
	body := make([]byte, syscall.SizeofIfInfomsg)
	body[0] = syscall.AF_UNSPEC
	binary.NativeEndian.PutUint32(body[4:8], uint32(index)) //nolint:gosec // interface indexes are small
	binary.NativeEndian.PutUint32(body[8:12], syscall.IFF_UP)
	binary.NativeEndian.PutUint32(body[12:16], syscall.IFF_UP)
	if err := s.request(syscall.RTM_NEWLINK, 0, body); err != nil {
		return fmt.Errorf("set interface %d up: %w", index, err)
	}
	return nil
}

// addAddress puts prefix on interface index (RTM_NEWADDR with IFA_LOCAL and IFA_ADDRESS).
func (s *routeSocket) addAddress(index int, prefix netip.Prefix) error {
	if !prefix.Addr().Is4() {
		return fmt.Errorf("add address %s: only IPv4 is supported", prefix)
	}
	body := make([]byte, syscall.SizeofIfAddrmsg)
	body[0] = syscall.AF_INET
	body[1] = byte(prefix.Bits())
	binary.NativeEndian.PutUint32(body[4:8], uint32(index)) //nolint:gosec // interface indexes are small
	addr := prefix.Addr().AsSlice()
	body = appendAttr(body, syscall.IFA_LOCAL, addr)
	body = appendAttr(body, syscall.IFA_ADDRESS, addr)
	if err := s.request(syscall.RTM_NEWADDR, syscall.NLM_F_CREATE|syscall.NLM_F_EXCL, body); err != nil {
		return fmt.Errorf("add address %s to interface %d: %w", prefix, index, err)
	}
	return nil
}

// appendAttr appends a route attribute, padded to four bytes.
func appendAttr(b []byte, typ uint16, data []byte) []byte {
	n := syscall.SizeofRtAttr + len(data)
	b = binary.NativeEndian.AppendUint16(b, uint16(n)) //nolint:gosec // attributes are a few bytes
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for range (4 - n%4) % 4 {
		b = append(b, 0)
	}
	return b
}

// request sends one message with flags added to NLM_F_REQUEST|NLM_F_ACK and returns the
// kernel's answer: nil for an acknowledgement, the errno otherwise.
func (s *routeSocket) request(typ, flags uint16, body []byte) error {
	s.seq++
	msg := make([]byte, syscall.SizeofNlMsghdr, syscall.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(msg[0:4], uint32(syscall.SizeofNlMsghdr+len(body))) //nolint:gosec // one small message
	binary.NativeEndian.PutUint16(msg[4:6], typ)
	binary.NativeEndian.PutUint16(msg[6:8], syscall.NLM_F_REQUEST|syscall.NLM_F_ACK|flags)
	binary.NativeEndian.PutUint32(msg[8:12], s.seq)
	msg = append(msg, body...)
	if err := syscall.Sendto(s.fd, msg, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := syscall.Recvfrom(s.fd, buf, 0)
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("parse answer: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != s.seq || m.Header.Type != syscall.NLMSG_ERROR {
				continue
			}
			if len(m.Data) < 4 {
				return errors.New("short acknowledgement")
			}
			if code := int32(binary.NativeEndian.Uint32(m.Data[:4])); code != 0 { //nolint:gosec // errno as the kernel wrote it
				return syscall.Errno(-code)
			}
			return nil
		}
	}
}
