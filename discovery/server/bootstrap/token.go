package bootstrap

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"coxswain.dev/coxswain/discovery/spiffe"
	"coxswain.dev/coxswain/discovery/wellknown"
)

var (
	// errTokenShape is why a token fails the checks made before its review.
	errTokenShape = errors.New("bootstrap: token refused before review")
	// errRecentlyRefused is why a token a review refused moments ago is refused again.
	errRecentlyRefused = errors.New("bootstrap: token refused by a recent review")
)

// tokenClaims are the claims of a projected ServiceAccount token read without verifying its
// signature: only to refuse, cheaply and before any TokenReview, what the API server would
// refuse anyway. Nothing read here is ever trusted for authorization.
type tokenClaims struct {
	Audience audience `json:"aud"`
	Expiry   float64  `json:"exp"`
	Subject  string   `json:"sub"`
}

// audience is the aud claim, a string or an array of strings.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = audience{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*a = many
	return nil
}

// serviceAccount names a ServiceAccount by namespace and name.
type serviceAccount struct {
	Namespace string
	Name      string
}

// precheckToken refuses a token that cannot pass review: not a compact JWS with a signing
// algorithm, not for our audience, expired at now, or whose subject is not a ServiceAccount. It
// returns the ServiceAccount the token claims, unverified: it only picks a lane, never authorizes.
func precheckToken(token string, now time.Time) (serviceAccount, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[2] == "" {
		return serviceAccount{}, fmt.Errorf("%w: not a compact JWS", errTokenShape)
	}
	var header struct {
		Alg string `json:"alg"`
	}
	if err := decodeSegment(parts[0], &header); err != nil {
		return serviceAccount{}, fmt.Errorf("%w: header: %w", errTokenShape, err)
	}
	if header.Alg == "" || strings.EqualFold(header.Alg, "none") {
		return serviceAccount{}, fmt.Errorf("%w: no signing algorithm", errTokenShape)
	}
	var claims tokenClaims
	if err := decodeSegment(parts[1], &claims); err != nil {
		return serviceAccount{}, fmt.Errorf("%w: claims: %w", errTokenShape, err)
	}
	if !slices.Contains(claims.Audience, wellknown.TokenAudience) {
		return serviceAccount{}, fmt.Errorf("%w: not for audience %s", errTokenShape, wellknown.TokenAudience)
	}
	if claims.Expiry <= 0 || !now.Before(time.Unix(int64(claims.Expiry), 0)) {
		return serviceAccount{}, fmt.Errorf("%w: expired or without expiry", errTokenShape)
	}
	ns, sa, err := spiffe.ServiceAccountFromUsername(claims.Subject)
	if err != nil {
		return serviceAccount{}, fmt.Errorf("%w: subject: %w", errTokenShape, err)
	}
	return serviceAccount{Namespace: ns, Name: sa}, nil
}

func decodeSegment(seg string, v any) error {
	raw, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}
