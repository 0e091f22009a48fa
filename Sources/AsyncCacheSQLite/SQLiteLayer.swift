import AsyncCache
import CSQLite
