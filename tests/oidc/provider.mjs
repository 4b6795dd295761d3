// A real OpenID provider for slurmtower's sign-on tests: panva's oidc-provider (OpenID
// Certified(TM) for the Basic, Config and RP-initiated logout profiles), on loopback.
//
// Configured from the environment by tests/oidc_provider.py:
//   OIDC_PORT      the port (issuer http://127.0.0.1:<port>)
//   OIDC_CLIENTS   JSON list of clients: client_id, client_secret (or none: public),
//                  redirect_uris, post_logout_redirect_uris
//   OIDC_ACCOUNTS  JSON {login: {groups: [...]}}: who exists and in which groups
// People sign in through the package's own development pages (any password: the tests
// are about the relying party, slurmtower). PKCE is required of every client; the ID
// token carries preferred_username and groups (conformIdTokenClaims off).
import Provider from "oidc-provider";

const port = Number(process.env.OIDC_PORT);
const issuer = `http://127.0.0.1:${port}`;
const accounts = JSON.parse(process.env.OIDC_ACCOUNTS || "{}");
const clients = JSON.parse(process.env.OIDC_CLIENTS || "[]").map((c) => ({
  grant_types: ["authorization_code"],
  response_types: ["code"],
  token_endpoint_auth_method: c.client_secret ? "client_secret_basic" : "none",
  ...c,
}));

const provider = new Provider(issuer, {
  clients,
  pkce: { required: () => true },
  claims: { openid: ["sub"], profile: ["preferred_username", "name", "groups"] },
  conformIdTokenClaims: false,
  cookies: { keys: ["slurmtower-test-provider-cookie-key"] },
  features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
  ttl: { AuthorizationCode: 60, IdToken: 600, AccessToken: 600, Interaction: 600, Session: 3600, Grant: 3600 },
  async findAccount(_ctx, id) {
    if (!Object.hasOwn(accounts, id)) {
      return undefined;
    }
    return {
      accountId: id,
      async claims() {
        return { sub: id, preferred_username: id, name: id, groups: accounts[id].groups || [] };
      },
    };
  },
});
provider.proxy = false;

const server = provider.listen(port, "127.0.0.1", () => {
  process.stdout.write(`listening ${issuer}\n`);
});
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
