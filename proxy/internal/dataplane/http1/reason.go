package http1

import "net/http"

// The reason codes of the request and chunked-body parsers' refusals. They are stable: the access
// log and the metrics carry them, and the differential tests key their allow-list on them.
const (
	// ReasonBareLF: a line of the head, or of a chunked body, ends in LF without CR.
	ReasonBareLF = "bare_lf"
	// ReasonBareCR: a CR that is not followed by LF.
	ReasonBareCR = "bare_cr"
	// ReasonEmptyLine: empty lines before the request line.
	ReasonEmptyLine = "empty_line_before_request"
	// ReasonRequestLine: a request line that is not method SP target SP version.
	ReasonRequestLine = "bad_request_line"
	// ReasonMethod: a method that is not a token.
	ReasonMethod = "bad_method"
	// ReasonMethodCase: a method with a lower-case letter (see HasLowerCase).
	ReasonMethodCase = "lowercase_method"
	// ReasonTarget: a request-target outside origin-form, absolute-form (http, https), "*" for
	// OPTIONS and authority-form for CONNECT, or with a byte or escape that is not allowed.
	ReasonTarget = "bad_target"
	// ReasonVersion: a version that is not HTTP/DIGIT.DIGIT.
	ReasonVersion = "bad_version"
	// ReasonUnsupportedVersion: a well-formed version other than HTTP/1.0 and HTTP/1.1 (505).
	ReasonUnsupportedVersion = "unsupported_version"
	// ReasonObsFold: a field line that starts with whitespace (obs-fold, or whitespace after the
	// request line).
	ReasonObsFold = "obs_fold"
	// ReasonSpaceBeforeColon: whitespace between a field name and its colon.
	ReasonSpaceBeforeColon = "space_before_colon"
	// ReasonFieldName: a field name that is not a token, or a line without a colon.
	ReasonFieldName = "bad_field_name"
	// ReasonFieldValue: a control byte (other than HTAB) in a field value.
	ReasonFieldValue = "bad_field_value"
	// ReasonMissingHost: an HTTP/1.1 request without a Host field.
	ReasonMissingHost = "missing_host"
	// ReasonDuplicateHost: more than one Host field.
	ReasonDuplicateHost = "duplicate_host"
	// ReasonHost: a Host, or the authority of the target, that is not uri-host [":" port].
	ReasonHost = "bad_host"
	// ReasonUserinfo: userinfo ("@") in the target's authority or in Host.
	ReasonUserinfo = "userinfo"
	// ReasonContentLength: a Content-Length that is not 1*DIGIT, or overflows int64.
	ReasonContentLength = "bad_content_length"
	// ReasonDuplicateContentLength: more than one Content-Length field, even if equal.
	ReasonDuplicateContentLength = "duplicate_content_length"
	// ReasonTransferEncoding: a Transfer-Encoding other than one field "chunked" (501).
	ReasonTransferEncoding = "unsupported_transfer_encoding"
	// ReasonTransferEncodingHTTP10: Transfer-Encoding in an HTTP/1.0 request.
	ReasonTransferEncodingHTTP10 = "transfer_encoding_http10"
	// ReasonContentLengthWithTransferEncoding: both framing fields.
	ReasonContentLengthWithTransferEncoding = "content_length_with_transfer_encoding"
	// ReasonTrailerName: a Trailer field announcing Transfer-Encoding, Content-Length or Trailer.
	ReasonTrailerName = "bad_trailer_announcement"
	// ReasonExpectation: an expectation other than one "100-continue" (417).
	ReasonExpectation = "unsupported_expectation"
	// ReasonHeadTooLarge: a head over MaxHeaderBytes (431; 400 for a trailer section).
	ReasonHeadTooLarge = "head_too_large"
	// ReasonTooManyFields: more fields than MaxHeaderCount (431; 400 for a trailer section).
	ReasonTooManyFields = "too_many_fields"
	// ReasonRequestLineTooLong: a request line over MaxRequestLine (414).
	ReasonRequestLineTooLong = "request_line_too_long"
	// ReasonChunkSize: a chunk size that is not 1*HEXDIG.
	ReasonChunkSize = "bad_chunk_size"
	// ReasonChunkSizeOverflow: a chunk size of more than 15 hexadecimal digits.
	ReasonChunkSizeOverflow = "chunk_size_overflow"
	// ReasonChunkExtension: a chunk extension that is not *( BWS ";" BWS token [ BWS "=" BWS
	// ( token / quoted-string ) ] ).
	ReasonChunkExtension = "bad_chunk_extension"
	// ReasonChunkEnd: chunk data not followed by CRLF.
	ReasonChunkEnd = "bad_chunk_end"
	// ReasonChunkLineTooLong: a chunk-size line of more than 4 KiB.
	ReasonChunkLineTooLong = "chunk_line_too_long"
	// ReasonChunkOverhead: chunk-size lines far longer than the data they frame, as net/http
	// counts them.
	ReasonChunkOverhead = "too_much_chunk_overhead"
)

// The refusals, allocated once so that a refusal costs no allocation. Callers must not modify
// them.
var (
	errBareLF            = &Error{http.StatusBadRequest, ReasonBareLF}
	errBareCR            = &Error{http.StatusBadRequest, ReasonBareCR}
	errEmptyLine         = &Error{http.StatusBadRequest, ReasonEmptyLine}
	errRequestLine       = &Error{http.StatusBadRequest, ReasonRequestLine}
	errMethod            = &Error{http.StatusBadRequest, ReasonMethod}
	errMethodCase        = &Error{http.StatusBadRequest, ReasonMethodCase}
	errTarget            = &Error{http.StatusBadRequest, ReasonTarget}
	errVersion           = &Error{http.StatusBadRequest, ReasonVersion}
	errUnsupportedVer    = &Error{http.StatusHTTPVersionNotSupported, ReasonUnsupportedVersion}
	errObsFold           = &Error{http.StatusBadRequest, ReasonObsFold}
	errSpaceBeforeColon  = &Error{http.StatusBadRequest, ReasonSpaceBeforeColon}
	errFieldName         = &Error{http.StatusBadRequest, ReasonFieldName}
	errFieldValue        = &Error{http.StatusBadRequest, ReasonFieldValue}
	errMissingHost       = &Error{http.StatusBadRequest, ReasonMissingHost}
	errDuplicateHost     = &Error{http.StatusBadRequest, ReasonDuplicateHost}
	errHost              = &Error{http.StatusBadRequest, ReasonHost}
	errUserinfo          = &Error{http.StatusBadRequest, ReasonUserinfo}
	errContentLength     = &Error{http.StatusBadRequest, ReasonContentLength}
	errDuplicateCL       = &Error{http.StatusBadRequest, ReasonDuplicateContentLength}
	errTransferEncoding  = &Error{http.StatusNotImplemented, ReasonTransferEncoding}
	errTEHTTP10          = &Error{http.StatusBadRequest, ReasonTransferEncodingHTTP10}
	errCLWithTE          = &Error{http.StatusBadRequest, ReasonContentLengthWithTransferEncoding}
	errTrailerName       = &Error{http.StatusBadRequest, ReasonTrailerName}
	errExpectation       = &Error{http.StatusExpectationFailed, ReasonExpectation}
	errHeadTooLarge      = &Error{http.StatusRequestHeaderFieldsTooLarge, ReasonHeadTooLarge}
	errTooManyFields     = &Error{http.StatusRequestHeaderFieldsTooLarge, ReasonTooManyFields}
	errRequestLineLong   = &Error{http.StatusRequestURITooLong, ReasonRequestLineTooLong}
	errChunkSize         = &Error{http.StatusBadRequest, ReasonChunkSize}
	errChunkSizeOverflow = &Error{http.StatusBadRequest, ReasonChunkSizeOverflow}
	errChunkExtension    = &Error{http.StatusBadRequest, ReasonChunkExtension}
	errChunkEnd          = &Error{http.StatusBadRequest, ReasonChunkEnd}
	errChunkLineLong     = &Error{http.StatusBadRequest, ReasonChunkLineTooLong}
	errChunkOverhead     = &Error{http.StatusBadRequest, ReasonChunkOverhead}
	errTrailerTooLarge   = &Error{http.StatusBadRequest, ReasonHeadTooLarge}
	errTrailerTooMany    = &Error{http.StatusBadRequest, ReasonTooManyFields}
)
