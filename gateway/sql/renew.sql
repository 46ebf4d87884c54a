-- POST /api/v1/lease/{leaseId}/extend: NULL when the lease is no longer active.
SELECT queen_renew($1::uuid, $2::int)
