package tenant

import (
	"fmt"
)

// maxClientID bounds a client_id in an acceptance list.
const maxClientID = 2048

func (c *checker) agents(p *AgentPolicy) {
	switch p.Accept {
	case AcceptAll, AcceptListed, AcceptUnlisted:
	default:
		c.Add("agents.accept", "must be all, listed or unlisted")
	}
	if len(p.ClientIDs) > 10_000 {
		c.Add("agents.client_ids", "must list at most 10000 client_ids")
		return
	}
	for i, id := range p.ClientIDs {
		f := fmt.Sprintf("agents.client_ids[%d]", i)
		if len(id) > maxClientID {
			c.Add(f, "must be at most %d characters", maxClientID)
			continue
		}
		c.url(f, id)
	}
	if len(p.SignInRefused) > 10_000 {
		c.Add("agents.sign_in_refused", "must list at most 10000 client_ids")
		return
	}
	for _, id := range sortedKeys(p.SignInRefused) {
		f := "agents.sign_in_refused." + id
		if len(id) > maxClientID {
			c.Add(f, "must be a client_id of at most %d characters", maxClientID)
			continue
		}
		c.url(f, id)
		seen := map[string]bool{}
		for i, g := range p.SignInRefused[id] {
			switch {
			case g != GrantAuthorizationCode && g != GrantDeviceCode:
				c.Add(fmt.Sprintf("%s[%d]", f, i), "must be %s or %s", GrantAuthorizationCode, GrantDeviceCode)
			case seen[g]:
				c.Add(fmt.Sprintf("%s[%d]", f, i), "is listed twice")
			}
			seen[g] = true
		}
	}
}
