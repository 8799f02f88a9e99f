package http1

import "errors"

// errNeedMore says a field line goes on past the bytes at hand.
var errNeedMore = errors.New("http1: field line incomplete")

// parseFields parses the field lines of b from start up to the empty line that ends the head,
// appending them to r.Fields, recording them in h and setting r.HeadLen. Every byte it looks at
// lies within the first maxBytes of b, so that a verdict never depends on bytes past the
// limit: a head that would end beyond it is refused once b passes it.
func parseFields(b []byte, start int, r *Request, h *headState, maxBytes, maxCount int) error {
	w := b[:min(len(b), maxBytes)]
	for p := start; ; {
		switch {
		case p == len(w):
			return moreOrTooLarge(b, maxBytes)
		case w[p] == '\r':
			if p+1 == len(w) {
				return moreOrTooLarge(b, maxBytes)
			}
			if w[p+1] != '\n' {
				return errBareCR
			}
			r.HeadLen = p + 2
			return nil
		case len(r.Fields) == maxCount:
			return errTooManyFields
		}
		r.Fields = append(r.Fields, Field{})
		f := &r.Fields[len(r.Fields)-1]
		next, err := parseField(w, p, f)
		if err != nil {
			if errors.Is(err, errNeedMore) {
				return moreOrTooLarge(b, maxBytes)
			}
			return err
		}
		h.note(f)
		p = next
	}
}

// moreOrTooLarge is the verdict on a head that goes on past b, or past the limit.
func moreOrTooLarge(b []byte, maxBytes int) error {
	if len(b) > maxBytes {
		return errHeadTooLarge
	}
	return ErrIncomplete
}

// parseField parses the field line of b at p into f, token ":" OWS value OWS CRLF (RFC 9112
// section 5), and returns where the next line starts; errNeedMore when b ends inside the line.
// Whitespace at its start (obs-fold) or before the colon is refused, and so are a control byte
// but HTAB in the value and a line ending in anything but CRLF.
func parseField(b []byte, p int, f *Field) (int, error) {
	name, t := b[p:], &tchar
	n := 0
	for n < len(name) && t[name[n]] {
		n++
	}
	i := p + n
	if i == len(b) {
		return 0, errNeedMore
	}
	if b[i] != ':' || i == p {
		return 0, nameError(b, p, i)
	}
	f.Name = b[p:i:i]
	v := i + 1
	for v < len(b) && (b[v] == ' ' || b[v] == '\t') {
		v++
	}
	end, err := valueEnd(b, v)
	if err != nil {
		return 0, err
	}
	e := end
	for e > v && (b[e-1] == ' ' || b[e-1] == '\t') {
		e--
	}
	f.Value = b[v:e:e]
	return end + 2, nil
}

// nameError returns the refusal of the field line of b at p whose name stops at b[i], which is
// not a colon after a name.
func nameError(b []byte, p, i int) error {
	switch b[i] {
	case ' ', '\t':
		if i == p {
			return errObsFold
		}
		return errSpaceBeforeColon
	case '\n':
		return errBareLF
	case '\r':
		if i+1 == len(b) {
			return errNeedMore
		}
		if b[i+1] != '\n' {
			return errBareCR
		}
	}
	return errFieldName
}

// valueEnd returns where the field value of b starting at v ends: at the CR of its CRLF.
func valueEnd(b []byte, v int) (int, error) {
	for {
		k := v + ctlIndex(b[v:])
		if k == len(b) {
			return 0, errNeedMore
		}
		switch b[k] {
		case '\t':
			v = k + 1
			continue
		case '\r':
			if k+1 == len(b) {
				return 0, errNeedMore
			}
			if b[k+1] != '\n' {
				return 0, errBareCR
			}
			return k, nil
		case '\n':
			return 0, errBareLF
		}
		return 0, errFieldValue
	}
}
