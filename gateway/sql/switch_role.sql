-- Switch the session to the role a token names ($1, a parameter: never SQL text), when the
-- gateway's login role is a member of it and it is neither the login role itself nor a superuser:
-- a token never acts with the login role's own grants (those of every role it serves) or a
-- superuser's. Checked at every request, so a REVOKE takes effect at the next one. Otherwise the
-- session goes back to the login role and the answer is false: the request is refused before any
-- statement of its own runs, and the connection is left as the login role.
SELECT pg_catalog.set_config('role', coalesce((
           SELECT r.rolname::text
             FROM pg_catalog.pg_roles r
            WHERE r.rolname = $1
              AND r.rolname <> session_user
              AND NOT r.rolsuper
              AND pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER')), 'none'), false) <> 'none'
