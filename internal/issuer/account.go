package issuer

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/poppyhost/poppyhost/internal/agentid"
	"github.com/poppyhost/poppyhost/internal/issuer/pages"
	"github.com/poppyhost/poppyhost/internal/tenant"
)

// accountPage lists the Personal Agents connected to the signed-in
// account, each with a button that disconnects it (spec 5.5).
func (s *Server) accountPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	c := tenant.FromContext(ctx)
	if !s.pageMethod(w, r) {
		return
	}
	action := ""
	if r.Method == http.MethodPost {
		if !s.parsePageForm(w, r) {
			return
		}
		action = r.PostForm.Get("action")
	}
	r.URL.RawQuery = ""
	acct, action, ok := s.signedIn(w, r, action, "Sign in to "+c.Settings.Organization.Name+" to see the agents connected to your account.")
	if !ok {
		return
	}
	notice := ""
	switch action {
	case "disconnect":
		id := r.PostForm.Get("client_id")
		conns, err := s.store.Connections(ctx, c.ID, acct.ID, s.now())
		if err != nil {
			s.failPage(w, r, err)
			return
		}
		if !slices.ContainsFunc(conns, func(cn Connection) bool { return cn.ClientID == id }) {
			// A stale page, or a client_id the User was given: never
			// fetch a URL the form names.
			notice = "That agent is not connected to your account."
			break
		}
		if err := s.store.Disconnect(ctx, c.ID, acct.ID, id); err != nil {
			s.failPage(w, r, err)
			return
		}
		notice = s.agentLabel(ctx, id) + " was disconnected: it can no longer use your account."
	case "signout":
		if err := s.signOut(w, r); err != nil {
			s.failPage(w, r, err)
			return
		}
		s.messagePage(w, r, http.StatusOK, "Signed out", "You are signed out of "+c.Settings.Organization.Name+".")
		return
	}
	conns, err := s.store.Connections(ctx, c.ID, acct.ID, s.now())
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	views := make([]pages.ConnectedAgent, 0, len(conns))
	for _, cn := range conns {
		view := pages.ConnectedAgent{ClientID: cn.ClientID, Scopes: cn.Scopes, Since: cn.Since}
		if a := s.connectedClient(ctx, cn.ClientID); a != nil {
			view.Name, view.MCPClient, view.HomePage, view.Registered = a.Name, a.Public, a.ClientURI, isRegistered(a.ClientID)
		}
		views = append(views, view)
	}
	csrf, err := s.csrfToken(w, r)
	if err != nil {
		s.failPage(w, r, err)
		return
	}
	pages.Render(w, http.StatusOK, pages.Account{Brand: s.brand(c), Username: acct.Username, Agents: views,
		DisconnectAction: r.URL.Path, SignOutAction: r.URL.Path, CSRF: csrf, Notice: notice})
}

// connectedClient is a connected client's metadata, a Personal Agent's or
// an MCP client's, or nil when it cannot be fetched now; the page then
// shows its client_id host.
func (s *Server) connectedClient(ctx context.Context, clientID string) *agentid.Client {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var a *agentid.Client
	var err error
	if isRegistered(clientID) {
		a, err = s.store.registration(ctx, tenant.FromContext(ctx).ID, clientID, s.now())
	} else {
		a, err = s.resolver.AnyClient(ctx, clientID)
	}
	if err != nil {
		return nil
	}
	return a
}

func (s *Server) agentLabel(ctx context.Context, clientID string) string {
	if a := s.connectedClient(ctx, clientID); a != nil && a.Name != "" {
		return a.Name
	}
	return clientID
}
