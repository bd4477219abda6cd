// Package redact masks secrets in what handoff prints: the password or token
// in a NATS URL's user info, the API token and the NATS credentials, in the
// printed configuration, in error messages (which may echo a URL) and in log
// lines. One Redactor, built from the agent's secrets, is used for all of
// them, so that a secret masked in one place is masked in every place.
package redact

import (
	"encoding/json"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Mask replaces a secret.
const Mask = "xxxxx"

// userinfo matches the user info of a URL in free text: a scheme, "://",
// then everything up to an '@' that comes before the host's end.
var userinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)([^@/\s"'<>?#]*)@`)

// URL masks the user info of every URL in s, which may be a
// comma-separated list: nats://bob:pw@h becomes nats://bob:xxxxx@h, and a
// user info without a password (nats://token@h, which NATS clients read as a
// token) becomes nats://xxxxx@h.
func URL(s string) string {
	return userinfo.ReplaceAllStringFunc(s, func(m string) string {
		sub := userinfo.FindStringSubmatch(m)
		scheme, info := sub[1], sub[2]
		if user, pw, ok := strings.Cut(info, ":"); ok {
			if pw == "" {
				return m
			}
			return scheme + user + ":" + Mask + "@"
		}
		return scheme + Mask + "@"
	})
}

// URLSecrets returns the secrets held in the user info of the URLs in s (a
// comma-separated list): each password or token, as written and
// percent-decoded.
func URLSecrets(s string) []string {
	var out []string
	for _, m := range userinfo.FindAllStringSubmatch(s, -1) {
		info := m[2]
		secret := info
		if _, pw, ok := strings.Cut(info, ":"); ok {
			secret = pw
		}
		if secret == "" {
			continue
		}
		out = append(out, secret)
		if dec, err := url.PathUnescape(secret); err == nil && dec != secret {
			out = append(out, dec)
		}
	}
	return out
}

// Redactor masks a fixed set of secrets, and the user info of any URL, in
// strings, errors and written bytes. The zero value masks URLs only. It is
// safe for concurrent use.
type Redactor struct {
	secrets []string // longest first, so that a secret inside another is masked whole
}

// New returns a Redactor for secrets; empty ones are ignored.
func New(secrets ...string) *Redactor {
	r := &Redactor{}
	for _, s := range secrets {
		if s == "" {
			continue
		}
		r.secrets = append(r.secrets, s)
		// A log line in JSON holds the secret escaped, as zerolog does:
		// like encoding/json, but leaving <, > and & as they are.
		var q strings.Builder
		enc := json.NewEncoder(&q)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err == nil {
			if esc := strings.TrimSuffix(q.String(), "\n"); esc[1:len(esc)-1] != s {
				r.secrets = append(r.secrets, esc[1:len(esc)-1])
			}
		}
	}
	slices.SortFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
	r.secrets = slices.Compact(r.secrets)
	return r
}

// String returns s with every secret and every URL's user info masked.
func (r *Redactor) String(s string) string {
	s = URL(s)
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, Mask)
	}
	return s
}

// Error returns err with its message masked; errors.Is and errors.As still
// see the errors it wraps. A nil err stays nil.
func (r *Redactor) Error(err error) error {
	if err == nil {
		return nil
	}
	if re, ok := err.(*redacted); ok && re.r == r {
		return err
	}
	return &redacted{r: r, err: err}
}

type redacted struct {
	r   *Redactor
	err error
}

func (e *redacted) Error() string { return e.r.String(e.err.Error()) }
func (e *redacted) Unwrap() error { return e.err }

// Writer returns a writer that masks what it is given before passing it to
// w. Each Write should carry whole lines (zerolog writes one event per call),
// so that no secret is split across two writes.
func (r *Redactor) Writer(w io.Writer) io.Writer { return &writer{r: r, w: w} }

type writer struct {
	r *Redactor
	w io.Writer
}

func (w *writer) Write(p []byte) (int, error) {
	if _, err := io.WriteString(w.w, w.r.String(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
