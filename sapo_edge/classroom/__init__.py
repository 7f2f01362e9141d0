"""The classroom: `sapo-edge host` (a teacher's room, its join code, the class view and the
projector page) and `sapo-edge join CODE` (a student's node taking the room's settings)."""
