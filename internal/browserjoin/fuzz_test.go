package browserjoin

import (
	"context"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/poppyhost/poppyhost/internal/tenant"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// FuzzJoinSubmit feeds step 3 of a browser join (spec 6) hostile Cookie
// headers and forms, after a code was authorized for a browser: the
// answer is never a 5xx, the code is taken only with the browser's join
// cookie and on its domain, and a Session cookie acts for nothing that
// was not started. In the seeds, {code} and {browser} stand for the
// code and the join cookie's value of the attempt. testdata/fuzz holds
// more seeds and every finding.
func FuzzJoinSubmit(f *testing.F) {
	for _, seed := range [][2]string{
		{"__Host-poppy_join={browser}", "code={code}"},
		{"__Host-poppy_join={browser}; __Host-poppy_join=other", "code={code}"},
		{"__Host-poppy_join=other; __Host-poppy_join={browser}", "code={code}"},
		{`__Host-poppy_join="{browser}"`, "code={code}"},
		{"__host-poppy_join={browser}", "code={code}"},
		{"__Host-poppy_join={browser}", "code={code}&code=bc_other"},
		{"__Host-poppy_join={browser}", "code=bc_other&code={code}"},
		{"__Host-poppy_join={browser}", "code=" + strings.Repeat("A", 5000)},
		{"__Host-poppy_join={browser}", "code=%zz"},
		{"__Host-poppy_join=\x00; __Host-poppy_session=\xff", "code=bc_\x00"},
		{"__Host-poppy_session={browser}; __Secure-x=1", "code={code}"},
		{"", ""},
	} {
		f.Add(seed[0], seed[1])
	}
	pool := testdb.NewPool(f)
	settings := tenant.DefaultSettings()
	settings.Organization = tenant.Organization{Name: "Shop", Domain: "shop.example"}
	c, err := tenant.NewStore(pool).Create(context.Background(), "shop", settings)
	if err != nil {
		f.Fatal(err)
	}
	store := NewStore(pool)
	h := New(Options{Store: store})
	grant := &Grant{ClientID: "https://agent.test/agent.json", SID: "sid-1"}
	f.Fuzz(func(t *testing.T, cookie, form string) {
		ctx := tenant.WithCompany(context.Background(), c)
		now := time.Now()
		code, browser := codePrefix+rand.Text(), rand.Text()+rand.Text()
		if err := store.newCode(ctx, c.ID, code, "shop.example", browser, now, now.Add(codeLifetime)); err != nil {
			t.Fatal(err)
		}
		if ok, err := store.authorize(ctx, c.ID, code, "shop.example", grant, now); err != nil || !ok {
			t.Fatalf("authorize: %v %v", ok, err)
		}
		cookie = strings.NewReplacer("{code}", code, "{browser}", browser).Replace(cookie)
		form = strings.NewReplacer("{code}", code, "{browser}", browser).Replace(form)

		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "https://shop.example"+Path, strings.NewReader(form))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Cookie", cookie)
		rec := httptest.NewRecorder()
		h.submit(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("answered %d: %s", rec.Code, rec.Body)
		}
		// The grant's Session was never started, so the code is taken
		// only to find the Session ended.
		if rec.Code != http.StatusBadRequest {
			t.Fatalf("answered %d with no Session to join", rec.Code)
		}
		if strings.Contains(rec.Body.String(), "has ended") && (!strings.Contains(cookie, browser) || !strings.Contains(form, code)) {
			t.Fatalf("took code %q with Cookie %q and form %q", code, cookie, form)
		}

		ws, err := h.Lookup(ctx, c, req)
		if err != nil || ws != nil {
			t.Fatalf("Cookie %q acts for %+v, %v", cookie, ws, err)
		}
	})
}
