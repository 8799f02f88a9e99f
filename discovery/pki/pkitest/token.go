package pkitest

import (
	"encoding/base64"
	"encoding/json"
	"time"

	"coxswain.dev/coxswain/discovery/wellknown"
)

// Token returns a token shaped like a projected ServiceAccount token of namespace/sa for the
// coxswain-discovery audience, valid for an hour, with a signature nobody can verify: enough to
// pass the checks a bootstrap makes before review, for tests whose Authenticator is a fake.
func Token(namespace, sa string) string {
	return TokenClaims(map[string]any{
		"aud": []string{wellknown.TokenAudience},
		"exp": time.Now().Add(time.Hour).Unix(),
		"sub": "system:serviceaccount:" + namespace + ":" + sa,
	})
}

// TokenClaims returns a JWS-shaped token with claims and an unverifiable signature.
func TokenClaims(claims map[string]any) string {
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(map[string]string{"alg": "RS256", "kid": "test"}) + "." + enc(claims) + ".c2lnbmF0dXJl"
}
