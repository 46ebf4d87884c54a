-- POST /api/v1/configure: the options the gateway maps (every one of them, so that configure
-- replaces the queue's settings as Queen's server does).
SELECT queen_configure($1::text, $2::jsonb)
